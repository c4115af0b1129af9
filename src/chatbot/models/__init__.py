"""The answer models: the fallback chain of chat providers, structured replies, usage and the offline responder.

Imports no other feature: the graph (agent/) calls it with the window it built.
"""
