"""Run feedback: one rating per (thread, run), replaced on re-send; exported for evaluation."""

from __future__ import annotations

from datetime import UTC, datetime

from chatbot.caller import CallerContext
from chatbot.db import langgraph_threads
from chatbot.db.pool import Pool
from chatbot.db.transaction_locks import share_thread_rows
from chatbot.ids import RunId, ThreadId
from chatbot.threads import queries


async def save_feedback(
    pool: Pool, thread_id: ThreadId, run_id: RunId, caller: CallerContext, score: str, comment: str | None
) -> bool:
    """Insert or replace the feedback of one run; False (nothing written) when the run is not recorded.

    The check and the write are one transaction holding the thread's rows key shared
    (db/locks.py): a thread deletion or an erasure either waits for the rating and deletes
    it, or ran first, and then the run is no longer recorded here.
    """
    async with pool.connection() as conn, conn.transaction():
        await share_thread_rows(conn, thread_id)
        if not await langgraph_threads.run_recorded(conn, thread_id, run_id, caller.tenant_id):
            return False
        now = datetime.now(UTC)
        params = (thread_id, run_id, caller.tenant_id, caller.user_id, score, comment, caller.locale, now, now)
        await queries.upsert_feedback(conn, params)
    return True
