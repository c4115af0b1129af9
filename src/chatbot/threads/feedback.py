"""Run feedback: one rating per (thread, run), replaced on re-send; exported for evaluation."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection

from chatbot.caller import CallerContext
from chatbot.db import langgraph_tables
from chatbot.db.pool import Pool

# The time is a parameter (the replica's clock): Citus refuses a non-IMMUTABLE function such
# as now() in `DO UPDATE SET` on a distributed table (docs/scaling.md).
_UPSERT = """
insert into run_feedback (thread_id, run_id, tenant_id, user_id, score, comment, locale, created_at, updated_at)
values (%s, %s, %s, %s, %s, %s, %s, %s, %s)
on conflict (thread_id, run_id) do update
set score = excluded.score, comment = excluded.comment, user_id = excluded.user_id, updated_at = excluded.updated_at,
    locale = excluded.locale
"""


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
        await conn.execute(_UPSERT, params)


async def delete_feedback_of_user(
    conn: AsyncConnection[Any], tenant_id: str, user_id: str, thread_ids: Sequence[str]
) -> int:
    """Delete the user's feedback in one tenant, and any feedback on `thread_ids`; return how many went."""
    cur = await conn.execute(
        "delete from run_feedback where (tenant_id = %s and user_id = %s) or thread_id = any(%s)",
        (tenant_id, user_id, list(thread_ids)),
    )
    return max(cur.rowcount, 0)
