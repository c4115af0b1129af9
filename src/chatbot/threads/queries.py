"""The threads feature's own SQL: system prompts, run feedback and run rate windows.

Statements as module constants beside the small functions that run them on a connection
the caller passes in. LangGraph's tables are db/langgraph_*.py's, the fences
db/locks.py's (AGENTS.md, "Where SQL lives").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict

from psycopg import AsyncConnection

from chatbot.db.rows import fetch_all, fetch_one
from chatbot.ids import RunId, TenantId, ThreadId, UserId

# --- system_prompts: each prompt's text once, by its sha256 (threads/record.py) ---

REMEMBER_PROMPT = "insert into system_prompts (sha256, text) values (%s, %s) on conflict (sha256) do nothing"
PROMPT_TEXT = "select text from system_prompts where sha256 = %s"


async def remember_prompt(conn: AsyncConnection[Any], sha256: str, text: str) -> None:
    """Insert a system prompt's text unless its sha256 is already stored."""
    await conn.execute(REMEMBER_PROMPT, (sha256, text))


async def read_prompt_text(conn: AsyncConnection[Any], sha256: str) -> str | None:
    """Return the text of a system prompt by its sha256, None when unknown."""
    row = await (await conn.execute(PROMPT_TEXT, (sha256,))).fetchone()
    return None if row is None else str(row["text"])


# --- run_feedback: one rating per (thread, run) (threads/_feedback.py, export.py) ---

# The time is a parameter (the replica's clock): Citus refuses a non-IMMUTABLE function such
# as now() in `DO UPDATE SET` on a distributed table (docs/scaling.md).
UPSERT_FEEDBACK = """
insert into run_feedback (thread_id, run_id, tenant_id, user_id, score, comment, locale, created_at, updated_at)
values (%s, %s, %s, %s, %s, %s, %s, %s, %s)
on conflict (thread_id, run_id) do update
set score = excluded.score, comment = excluded.comment, user_id = excluded.user_id, updated_at = excluded.updated_at,
    locale = excluded.locale
"""
DELETE_FEEDBACK_OF_USER = "delete from run_feedback where (tenant_id = %s and user_id = %s) or thread_id = any(%s)"
# One thread's ratings after another, so each thread's state is read once (the export).
RATED_SINCE = """
select thread_id, run_id::text as run_id, tenant_id, user_id, locale, score, comment, updated_at
from run_feedback where updated_at >= %s
order by thread_id, updated_at, run_id
"""
# Read by tenant: an evaluation runs for one tenant's knowledge base (evaluation/replayed.py).
RATED_OF_TENANT = """
select thread_id, run_id::text as run_id, locale, score from run_feedback
where tenant_id = %(tenant)s and updated_at >= %(since)s and (%(until)s::timestamptz is null or updated_at < %(until)s)
  and (%(score)s::text is null or score = %(score)s)
order by updated_at, thread_id, run_id
"""


async def upsert_feedback(conn: AsyncConnection[Any], params: tuple[Any, ...]) -> None:
    """Insert or replace one run's feedback; `params` in UPSERT_FEEDBACK's order."""
    await conn.execute(UPSERT_FEEDBACK, params)


async def delete_feedback_of_user(
    conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId, thread_ids: Sequence[ThreadId]
) -> int:
    """Delete the user's feedback in one tenant, and any feedback on `thread_ids`; return how many went."""
    cur = await conn.execute(DELETE_FEEDBACK_OF_USER, (tenant_id, user_id, list(thread_ids)))
    return max(cur.rowcount, 0)


class TenantRating(TypedDict):
    """A run's rating as an evaluation reads it (RATED_OF_TENANT)."""

    thread_id: ThreadId
    run_id: RunId
    locale: str | None
    score: str


class Rating(TenantRating):
    """A run's rating as the feedback export reads it (RATED_SINCE)."""

    tenant_id: TenantId
    user_id: UserId
    comment: str | None
    updated_at: datetime


async def rated_since(conn: AsyncConnection[Any], since: datetime) -> list[Rating]:
    """Return every rating made or replaced at or after `since`, grouped by thread."""
    return await fetch_all(conn, Rating, RATED_SINCE, (since,))


async def rated_of_tenant(
    conn: AsyncConnection[Any], tenant_id: TenantId, since: datetime, until: datetime | None, score: str | None
) -> list[TenantRating]:
    """Return the tenant's ratings in [since, until) (of one score when given), oldest first."""
    params = {"tenant": tenant_id, "since": since, "until": until, "score": score}
    return await fetch_all(conn, TenantRating, RATED_OF_TENANT, params)


# --- run_rate_windows: runs per (tenant, user) per minute (threads/ratelimit.py) ---

PEEK_WINDOW = """
select runs, ceil(extract(epoch from (date_trunc('minute', now()) + interval '1 minute' - now())))::int as retry
from run_rate_windows
where tenant_id = %s and user_id = %s and window_start = date_trunc('minute', now())
"""
# Count the run only if the window still has room. One statement naming (tenant, user): on
# Citus a router statement on the shard of the tenant.
CONSUME_RUN = """
insert into run_rate_windows as w (tenant_id, user_id, window_start, runs)
values (%(t)s, %(u)s, date_trunc('minute', now()), 1)
on conflict (tenant_id, user_id, window_start) do update set runs = w.runs + 1 where w.runs < %(limit)s
returning runs
"""
# The user's older windows go when a new one is opened (its first run): a statement of its
# own, once per user and minute, since a delete and an insert in one statement (a writing
# CTE) is planned by Citus through the coordinator rather than routed to one shard.
FORGET_OLD_WINDOWS = """
delete from run_rate_windows
where tenant_id = %(t)s and user_id = %(u)s and window_start < date_trunc('minute', now())
"""
RETRY_AFTER = (
    "select greatest(1, ceil(extract(epoch from "
    "(date_trunc('minute', now()) + interval '1 minute' - now())))::int) as retry"
)
FORGET_USER_COUNTS = "delete from run_rate_windows where tenant_id = %s and user_id = %s"


class RateWindow(TypedDict):
    """The user's current minute: runs counted, seconds until it ends (PEEK_WINDOW)."""

    runs: int
    retry: int


class WindowKey(TypedDict):
    """Whose window a statement counts in (`t`, `u`) and the runs it may hold (`limit`)."""

    t: str
    u: str
    limit: int


async def peek_window(conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId) -> RateWindow | None:
    """Return the user's current window (`runs`, `retry` seconds), None when it has no run yet."""
    return await fetch_one(conn, RateWindow, PEEK_WINDOW, (tenant_id, user_id))


async def consume_run(conn: AsyncConnection[Any], params: WindowKey) -> int | None:
    """Count one run in the user's window if it has room (`t`, `u`, `limit`); return the count, None when full."""
    row = await (await conn.execute(CONSUME_RUN, params)).fetchone()
    return None if row is None else int(row["runs"])


async def forget_old_windows(conn: AsyncConnection[Any], params: WindowKey) -> None:
    """Delete the user's windows before this minute's (`t`, `u`)."""
    await conn.execute(FORGET_OLD_WINDOWS, params)


async def retry_after(conn: AsyncConnection[Any]) -> int | None:
    """Return the seconds left in this minute's window (at least 1)."""
    row = await (await conn.execute(RETRY_AFTER)).fetchone()
    return int(row["retry"]) if row else None


async def forget_user_counts(conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId) -> None:
    """Delete the user's run counters (erasure: no row may keep the user's id)."""
    await conn.execute(FORGET_USER_COUNTS, (tenant_id, user_id))
