"""Recall's index writes a run's search did not need, written after its answer (recall/service.py).

Recall indexes what the thread said since its last indexed turn, usually the previous run's
question and answer. When the run's search did not need those turns (the window holds
them), the write waits for the answer: awaited before the model call it cost the first
token a round trip (more with an embeddings model). Started once the answer is done, it
goes out beside the run's final checkpoint write, and the run service awaits it before
the thread's lock goes (`Context.handoffs`), so it still passes the run's fence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from chatbot.agent.context import Context
from chatbot.recall.service import PendingIndexWrite

log = logging.getLogger(__name__)


class IndexLater:
    """The index writes one run handed over (`IndexWriter.defer`), started after its answer."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.pending: list[PendingIndexWrite] = []

    @property
    def defer(self) -> Callable[[PendingIndexWrite], None] | None:
        """Where recall hands a write over; None (Studio, an evaluation: nothing awaits it) writes at once."""
        return None if self.ctx.handoffs is None else self.pending.append

    def start(self) -> None:
        """Start the writes handed over (the answer is done): the run service awaits them before its `end`."""
        if self.ctx.handoffs is None:
            return
        for write in self.pending:
            self.ctx.handoffs.append(asyncio.ensure_future(_written(write)))
        self.pending.clear()


async def _written(write: PendingIndexWrite) -> None:
    """Write, or say why not: the answer stands either way, and the next run indexes those turns."""
    try:
        await write.write()
    except Exception as exc:  # a lost lease (LeaseLost: nothing written), Postgres, an embeddings provider
        log.warning(
            "recall's index write after the answer failed",
            extra={"thread_id": write.thread_id, "error": type(exc).__name__},
        )
