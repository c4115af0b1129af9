"""What the conversational graph hands to the memory writer: one answered turn.

It lives in memory, not in agent, so the import goes one way: the graph (agent) knows
what memory accepts, memory never needs the graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chatbot.memory.extraction import MemoryCandidates


@dataclass(frozen=True, slots=True)
class MemoryJob:
    """One answered turn handed to the memory writer, after the answer."""

    tenant_id: str
    user_id: str
    thread_id: str
    run_id: str
    locale: str
    user_text: str
    offline_candidates: MemoryCandidates | None = None
    """What the offline rules found in `user_text`, when the graph already ran them for this
    turn (the offline responder needs them to answer "noted"); the writer then reuses them
    instead of extracting the same message a second time."""


MemorySink = Callable[[MemoryJob], None]


def drop_memory_job(_: MemoryJob) -> None:
    """Forget a memory job (a graph built without a memory writer)."""
