"""`python -m chatbot.cli`: the same as the `chatbot` command."""

from chatbot.cli.main import app

app()
