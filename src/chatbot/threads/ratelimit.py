"""Runs per (tenant, user) per minute, counted in Postgres so every replica shares the count."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool

_PEEK = """
select runs, ceil(extract(epoch from (date_trunc('minute', now()) + interval '1 minute' - now())))::int as retry
from run_rate_windows
where tenant_id = %s and user_id = %s and window_start = date_trunc('minute', now())
"""
# Count the run only if the window still has room. One statement naming (tenant, user): on
# Citus a router statement on the shard of the tenant.
_CONSUME = """
insert into run_rate_windows as w (tenant_id, user_id, window_start, runs)
values (%(t)s, %(u)s, date_trunc('minute', now()), 1)
on conflict (tenant_id, user_id, window_start) do update set runs = w.runs + 1 where w.runs < %(limit)s
returning runs
"""
# The user's older windows go when a new one is opened (its first run): a statement of its
# own, once per user and minute, since a delete and an insert in one statement (a writing
# CTE) is planned by Citus through the coordinator rather than routed to one shard.
_FORGET_OLD = """
delete from run_rate_windows
where tenant_id = %(t)s and user_id = %(u)s and window_start < date_trunc('minute', now())
"""
_RETRY = (
    "select greatest(1, ceil(extract(epoch from "
    "(date_trunc('minute', now()) + interval '1 minute' - now())))::int) as retry"
)


class RateLimiter:
    """A fixed one-minute window per user; only runs that start are counted."""

    def __init__(self, pool: Pool, per_minute: int) -> None:
        self.pool = pool
        self.per_minute = per_minute

    async def retry_after(self, caller: CallerContext) -> int | None:
        """Return seconds to wait when the user's window is full, without counting anything."""
        if self.per_minute <= 0:
            return None
        async with self.pool.connection() as conn:
            row = await (await conn.execute(_PEEK, (caller.tenant_id, caller.user_id))).fetchone()
        if row is None or row["runs"] < self.per_minute:
            return None
        return max(1, int(row["retry"]))

    async def consume(self, caller: CallerContext) -> int | None:
        """Count one started run; return seconds to wait instead when the window is full."""
        if self.per_minute <= 0:
            return None
        params = {"t": caller.tenant_id, "u": caller.user_id, "limit": self.per_minute}
        async with self.pool.connection() as conn:
            counted = await (await conn.execute(_CONSUME, params)).fetchone()
            if counted:
                if counted["runs"] == 1:
                    await conn.execute(_FORGET_OLD, params)
                return None
            row = await (await conn.execute(_RETRY)).fetchone()
        return int(row["retry"]) if row else 60


async def forget_user_counts(conn: AsyncConnection[Any], tenant_id: str, user_id: str) -> None:
    """Delete the user's run counters (erasure: no row may keep the user's id)."""
    await conn.execute("delete from run_rate_windows where tenant_id = %s and user_id = %s", (tenant_id, user_id))
