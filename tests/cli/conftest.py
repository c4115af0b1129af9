"""The terminal-chat tests talk to a real `chatbot serve` replica (tests/fixtures/client.py)."""

from tests.fixtures.client import kb_replica

__all__ = ["kb_replica"]
