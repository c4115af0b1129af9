"""Run feedback: one rating per (thread, run), replaced on re-send; exported for evaluation."""

from __future__ import annotations

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool

_RUN_EXISTS = (
    "select 1 from checkpoints where thread_id = %s and checkpoint_ns = '' "
    "and metadata ->> 'run_id' = %s and metadata ->> 'tenant_id' = %s limit 1"
)
_UPSERT = """
insert into run_feedback (thread_id, run_id, tenant_id, user_id, score, comment, locale)
values (%s, %s, %s, %s, %s, %s, %s)
on conflict (thread_id, run_id) do update
set score = excluded.score, comment = excluded.comment, user_id = excluded.user_id, updated_at = now(),
    locale = excluded.locale
"""


async def run_exists(pool: Pool, thread_id: str, run_id: str, tenant_id: str) -> bool:
    """Return True when `run_id` is recorded in the thread's checkpoint metadata."""
    async with pool.connection() as conn:
        return await (await conn.execute(_RUN_EXISTS, (thread_id, run_id, tenant_id))).fetchone() is not None


async def save_feedback(
    pool: Pool, thread_id: str, run_id: str, caller: CallerContext, score: str, comment: str | None
) -> None:
    """Insert or replace the feedback of one run."""
    async with pool.connection() as conn:
        params = (thread_id, run_id, caller.tenant_id, caller.user_id, score, comment, caller.locale)
        await conn.execute(_UPSERT, params)
