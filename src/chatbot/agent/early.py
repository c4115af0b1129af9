"""Reads a run starts before its graph: the user's memory and the knowledge search.

Neither depends on the thread's checkpoint, only on the caller and the question. Started as
soon as the run holds its thread, they go out beside the input's checkpoint write and the
graph's state load instead of after them: across a network, one round trip fewer before the
first token. The graph's first step takes their results (agent/nodes.py); the reads and
their errors are the ones the nodes would have met.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from chatbot.agent.collaborators import AgentDeps
from chatbot.caller import CallerContext
from chatbot.memory.read import Remembered
from chatbot.responses import QuotedChunk


@dataclass(eq=False)
class EarlyReads:
    """The reads of one run under way: its memory (None without a reader) and its knowledge search."""

    question: str
    memory: asyncio.Task[Remembered] | None
    chunks: asyncio.Task[Sequence[QuotedChunk]]

    def cancel(self) -> None:
        """Stop what is still under way (the run ended before its graph used it); nothing is raised."""
        for task in (self.memory, self.chunks):
            if task is None:
                continue
            task.cancel()
            # Read here, so an error nobody awaited is not reported as never retrieved.
            task.add_done_callback(_forget)


def _forget(task: asyncio.Task[object]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        task.exception()


def start_early_reads(deps: AgentDeps, caller: CallerContext, question: str) -> EarlyReads:
    """Start the run's memory read and knowledge search; return them under way."""
    reader = deps.memory_reader
    memory = None if reader is None else asyncio.ensure_future(reader(caller.tenant_id, caller.user_id))
    chunks = asyncio.ensure_future(deps.retriever(caller, question))
    return EarlyReads(question, memory, chunks)
