"""Run feedback: one rating per (thread, run), replaced on re-send; exported for evaluation."""

from __future__ import annotations

from datetime import UTC, datetime

from chatbot.caller import CallerContext
from chatbot.db import langgraph_tables
from chatbot.db.pool import Pool
from chatbot.threads import queries


async def run_exists(pool: Pool, thread_id: str, run_id: str, tenant_id: str) -> bool:
    """Return True when `run_id` is recorded in the thread's checkpoint metadata."""
    async with pool.connection() as conn:
        return await langgraph_tables.run_recorded(conn, thread_id, run_id, tenant_id)


async def save_feedback(
    pool: Pool, thread_id: str, run_id: str, caller: CallerContext, score: str, comment: str | None
) -> None:
    """Insert or replace the feedback of one run."""
    async with pool.connection() as conn:
        now = datetime.now(UTC)
        params = (thread_id, run_id, caller.tenant_id, caller.user_id, score, comment, caller.locale, now, now)
        await queries.upsert_feedback(conn, params)
