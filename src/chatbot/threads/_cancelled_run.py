"""A run a user's cancel stopped, on the replica running it: telling it so, and writing its record.

threads/cancel.py decides a cancel in Postgres; the run's replica then learns that its graph
stopped for that cancel (`stopped_by_user`), not for a shutdown or a lost lease, and writes
the run's record as cancelled, under the cancel's token (`record_cancelled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any, cast

from langgraph.graph.state import CompiledStateGraph

from chatbot.agent.outcome import GraphOutcome
from chatbot.agent.record import chunk_versions
from chatbot.agent.result import RunResult
from chatbot.db.locks import Fence, LeaseLost
from chatbot.db.pool import Pool
from chatbot.db.run_record import RecordedRun
from chatbot.db.saver import fenced
from chatbot.errors import DATABASE_ERRORS
from chatbot.failures import Failure
from chatbot.threads import cancel
from chatbot.threads._inflight import InFlight

log = logging.getLogger("chatbot.runs")

# Pauses between attempts at a cancelled run's record (about 6 s in all, the lock held).
_RECORD_RETRY_SECONDS = (0.1, 0.3, 0.6, 1.0, 2.0, 2.0)


async def stopped_by_user(pool: Pool, run: InFlight, exc: BaseException) -> bool:
    """Return whether the run's graph stopped (`exc`) because a user's cancel decided so."""
    if run.stopped_by_cancel:
        # Stopped by a cancel (threads/cancel.py): the CancelledError it threw in the
        # graph has been delivered; forget it so the awaits after the graph run normally.
        if isinstance(exc, asyncio.CancelledError):
            current = cast(asyncio.Task[None], asyncio.current_task())
            while current.cancelling():
                current.uncancel()
        return True
    if isinstance(exc, LeaseLost) and run.lease.fence is not None:
        # The final write was refused: by a cancel whose notice has not come yet?
        with contextlib.suppress(*DATABASE_ERRORS):
            return await cancel.was_cancelled(pool, run.thread_id, run.lease.fence.token)
    return False


async def record_cancelled(
    graph: CompiledStateGraph[Any, Any, Any, Any], pool: Pool, model: str | None, run: InFlight, result: RunResult
) -> None:
    """Write the cancelled run's end: what the user was shown (not in the transcript), no answer.

    Written as the `generate` node's update, under the cancel token the cancel gave the
    thread's fence: only this run's holder can write it, and only after that cancel.
    `model` is the configured model, named in the record.
    """
    lease = run.lease
    assert lease.fence is not None
    record = RecordedRun(
        run.run_id,
        status="cancelled",
        reason="cancelled",
        model=model,
        answer_id=str(uuid.uuid4()),
        shown=run.stream.shown,
        input_id=run.input_id,
        retrieved=chunk_versions(result.chunks),
        usage=tuple(call.model_dump() for call in result.usage),
    ).dump()
    outcome = GraphOutcome("error", failure=Failure("cancelled")).stored()
    token: str | None = cancel.cancel_token(lease.fence.token)
    # Retried (the thread's lock is still held, so nothing else writes it meanwhile): a
    # database that blinks must not lose what the user was shown. A refused write reads
    # which cancel token the fence holds and writes under it; none means another holder
    # took the thread (this run's lock session dropped), and then the thread is not ours.
    for pause in (*_RECORD_RETRY_SECONDS, None):
        if token is None:
            break
        try:
            await asyncio.shield(
                graph.aupdate_state(
                    fenced(run.config, Fence(run.thread_id, token)),
                    {"outcome": outcome, "record": record},
                    as_node="generate",
                )
            )
            return
        except (*DATABASE_ERRORS, LeaseLost) as exc:
            error = type(exc).__name__
            if pause is None:
                break
        await asyncio.sleep(pause)
        with contextlib.suppress(*DATABASE_ERRORS):
            token = await cancel.record_token(pool, run.thread_id, lease.fence.token)
    log.error(
        "cancelled run's record not written", extra={"thread_id": run.thread_id, "run_id": run.run_id, "error": error}
    )
