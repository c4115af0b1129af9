"""One run per thread: a session advisory lock held on a dedicated connection.

The lock lives on a connection from a pool of its own, so runs waiting on model calls
can never starve the pool the checkpointer and store need. Postgres frees a session lock
the moment its connection dies, so a killed replica releases its threads at once; and the
lock pool's `reset` runs `pg_advisory_unlock_all()`, so a connection never goes back to
the pool still holding one. Session locks are re-entrant on one connection, which is why
every holder gets a connection of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from psycopg import AsyncConnection

from chatbot.db.pool import Pool

log = logging.getLogger(__name__)

# hashtextextended(namespace || id) -> bigint: thread locks cannot collide with the
# migration lock (two-int form) or with user locks (another namespace).
_THREAD_KEY = "select pg_try_advisory_lock(hashtextextended('chatbot/thread/' || %s, 0)) as ok"
_USER_KEY = "select pg_try_advisory_lock(hashtextextended('chatbot/user/' || %s || '/' || %s, 0)) as ok"


class Lease:
    """A held advisory lock; `release` returns its connection to the lock pool."""

    def __init__(self, pool: Pool, conn: AsyncConnection[Any]) -> None:
        self._pool = pool
        self._conn: AsyncConnection[Any] | None = conn

    @property
    def held(self) -> bool:
        """Return True until released."""
        return self._conn is not None

    async def release(self) -> None:
        """Release the lock; safe to call more than once, and under cancellation."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # Shielded: a cancelled caller (client gone, shutdown) must still unlock, or the
        # thread would stay locked until the connection is recycled.
        await asyncio.shield(self._return(conn))

    async def _return(self, conn: AsyncConnection[Any]) -> None:
        try:
            await conn.execute("select pg_advisory_unlock_all()")
        except Exception:
            # A broken connection holds no locks any more; the pool discards it.
            log.warning("lock connection broken on release")
        await self._pool.putconn(conn)


class Locks:
    """Try-locks on threads and users, shared by every replica through Postgres."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def try_thread(self, thread_id: str) -> Lease | None:
        """Take the thread's lock now, or return None when a run holds it."""
        return await self._try(_THREAD_KEY, (thread_id,))

    async def try_user(self, tenant_id: str, user_id: str) -> Lease | None:
        """Take the (tenant, user) lock now, or return None when someone holds it."""
        return await self._try(_USER_KEY, (tenant_id, user_id))

    async def wait_thread(self, thread_id: str, timeout: float) -> Lease | None:
        """Poll for the thread's lock up to `timeout` seconds (polling: see migrate.py)."""
        return await self._wait(_THREAD_KEY, (thread_id,), timeout)

    async def wait_user(self, tenant_id: str, user_id: str, timeout: float) -> Lease | None:
        """Poll for the (tenant, user) lock up to `timeout` seconds."""
        return await self._wait(_USER_KEY, (tenant_id, user_id), timeout)

    async def _wait(self, sql: str, params: tuple[str, ...], timeout: float) -> Lease | None:
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            lease = await self._try(sql, params)
            if lease is not None or time.monotonic() >= deadline:
                return lease
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.25)

    async def _try(self, sql: str, params: tuple[str, ...]) -> Lease | None:
        conn = await self.pool.getconn()
        try:
            row = await (await conn.execute(sql, params)).fetchone()
        except BaseException:
            await self.pool.putconn(conn)
            raise
        if row and row["ok"]:
            return Lease(self.pool, conn)
        await self.pool.putconn(conn)
        return None
