"""Pending writes that wait for the run's next checkpoint write, to go out in its transaction.

A state update (a run's input) makes the checkpointer write the input task's writes, then the
checkpoint that applies them: two fenced transactions one after the other. Inside
`writes_join_next_checkpoint`, the saver (db/saver.py) records the first instead of sending it
and sends it first in the second's transaction: one round trip, and both or neither written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from chatbot.db.locks import Fence


class Recorder:
    """Stands in for the cursor of the library's `aput_writes` while its statements are kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, list[Any]]] = []

    async def executemany(self, query: Any, params_seq: Any, **_: Any) -> None:
        """Keep the statement and its rows (the library sends pending writes with `executemany`)."""
        self.calls.append((query, list(params_seq)))


class KeptWriter(Protocol):
    """The saver that kept writes and can still write them on their own."""

    async def write_kept(self, kept: Kept) -> None:
        """Write `kept` in a fenced transaction of its own."""


@dataclass(frozen=True, slots=True)
class Kept:
    """Pending writes kept for the next checkpoint write of the same run (its fence)."""

    saver: KeptWriter
    fence: Fence
    calls: list[tuple[Any, list[Any]]]


recording: ContextVar[Recorder | None] = ContextVar("chatbot_recording_writes", default=None)
"""Set while the library's `aput_writes` runs on a `Recorder` instead of a cursor."""
joining: ContextVar[list[Kept] | None] = ContextVar("chatbot_writes_joining", default=None)
"""The writes kept so far inside `writes_join_next_checkpoint`; None outside it."""


@asynccontextmanager
async def writes_join_next_checkpoint() -> AsyncIterator[None]:
    """Inside, a fenced run's pending writes go out in the transaction of its next checkpoint write.

    Writes no checkpoint followed are written on leaving (unless the block raised: then
    nothing of it was written).
    """
    token = joining.set([])
    try:
        yield
        left = list(joining.get() or [])
    finally:
        joining.reset(token)
    for kept in left:
        await kept.saver.write_kept(kept)
