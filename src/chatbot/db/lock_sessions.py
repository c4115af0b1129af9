"""A lock session: one dedicated Postgres session holding many advisory locks (db/locks.py takes them).

A session advisory lock belongs to a session, not to a query, so one session holds the locks
of thousands of runs. A session that drops loses every lock on it: `ping` notices that (the
leases on it then report `lost`) and `fetch` replaces a session cut since its last statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any, TypedDict

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from chatbot.db.connection_options import ConnectionOptions
from chatbot.ids import TenantId, ThreadId, UserId

# The locks' logger, as before the sessions had a module of their own: operators filter by it.
log = logging.getLogger("chatbot.db.locks")


class LockParams(TypedDict, total=False):
    """The parameters of a lock's statements: the key's parts and the fence token."""

    thread: ThreadId
    token: str
    tenant: TenantId
    user: UserId


class LockSession:
    """One dedicated Postgres session holding many advisory locks."""

    def __init__(self, conninfo: str, kwargs: ConnectionOptions, name: str) -> None:
        self._conninfo = conninfo
        self._kwargs = kwargs
        self.name = name
        self.conn: AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()

    async def connection(self) -> AsyncConnection[Any]:
        """Return the live session, connecting when there is none."""
        conn = self.conn
        if conn is not None and not conn.closed:
            return conn
        async with self._connecting:
            if self.conn is None or self.conn.closed:
                # Named by process, so operators (and tests) can tell whose locks a session holds.
                self.conn = await AsyncConnection.connect(
                    self._conninfo, **self._kwargs, application_name=f"chatbot-{self.name}-{os.getpid()}"
                )
            return self.conn

    async def fetch(self, sql: str, params: LockParams) -> tuple[AsyncConnection[Any], DictRow]:
        """Run one statement on the session; return the connection it ran on and its row.

        A session cut since its last statement (Postgres restarted, the watcher's ping not
        yet due) is replaced and the statement sent once more on the new one: the old
        session's locks went with it, so nothing is taken twice, and a Postgres that answers
        again serves the request instead of a `503` (docs/measurements/reliability.md).
        """
        for attempt in (1, 2):
            conn = await self.connection()
            try:
                row = await (await conn.execute(sql, params)).fetchone()
            except psycopg.OperationalError:
                # Only a lost connection is retried, never a statement's own failure.
                lost = conn.broken
                await self.drop(conn)
                if attempt == 2 or not lost:
                    raise
                continue
            assert row is not None
            return conn, row
        raise AssertionError("unreachable")

    async def drop(self, conn: AsyncConnection[Any]) -> None:
        """Forget a broken session: every lock taken on it is gone with it."""
        if self.conn is conn:
            self.conn = None
            log.warning("lock session lost", extra={"session": self.name})
        with contextlib.suppress(Exception):
            await conn.close()

    async def ping(self) -> None:
        """Notice a dropped session (its leases then report `lost`) and reconnect."""
        conn = self.conn
        if conn is None:
            with contextlib.suppress(psycopg.Error, OSError):
                await self.connection()
            return
        try:
            await conn.execute("select 1")
        except psycopg.Error:
            await self.drop(conn)

    async def close(self) -> None:
        """Close the session (its locks are released by Postgres)."""
        if self.conn is not None:
            conn, self.conn = self.conn, None
            with contextlib.suppress(Exception):
                await conn.close()
