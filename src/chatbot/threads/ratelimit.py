"""Runs per (tenant, user) per minute, counted in Postgres so every replica shares the count.

The statements are threads/queries.py's; erasure deletes the counters there too
(`forget_user_counts`).
"""

from __future__ import annotations

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.threads import queries


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
            row = await queries.peek_window(conn, caller.tenant_id, caller.user_id)
        if row is None or row["runs"] < self.per_minute:
            return None
        return max(1, int(row["retry"]))

    async def consume(self, caller: CallerContext) -> int | None:
        """Count one started run; return seconds to wait instead when the window is full."""
        if self.per_minute <= 0:
            return None
        params = queries.WindowKey(t=caller.tenant_id, u=caller.user_id, limit=self.per_minute)
        async with self.pool.connection() as conn:
            runs = await queries.consume_run(conn, params)
            if runs is not None:
                if runs == 1:
                    await queries.forget_old_windows(conn, params)
                return None
            retry = await queries.retry_after(conn)
        return retry if retry is not None else 60
