"""Conversational agent service of the insurance support chatbot."""

__version__ = "0.1.0"
