"""The client tests run against real `chatbot serve` replicas (tests/fixtures/client.py)."""

from tests.fixtures.client import kb_replica, unreachable_replica

__all__ = ["kb_replica", "unreachable_replica"]
