"""The connection pool of the graph, the API and the command line (locks have sessions of their own: db/locks.py)."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from chatbot.config import Settings
from chatbot.db.connection_options import ConnectionOptions
from chatbot.db.embedded import start_embedded_postgres
from chatbot.db.patient_pool import PatientPool

Pool = AsyncConnectionPool[AsyncConnection[DictRow]]
CLI_CONNECT_TIMEOUT_SECONDS = 10

# Long model calls leave connections idle; keepalives notice a dead peer, and `max_idle`
# (below any server/proxy idle timeout) retires connections before they are cut.
_KEEPALIVES = ConnectionOptions(keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3)


def connection_kwargs(settings: Settings) -> ConnectionOptions:
    """Return the connection options every pooled connection uses."""
    # autocommit: the checkpointer's setup builds indexes CONCURRENTLY and every statement
    # of ours is its own transaction unless it opens one explicitly.
    return ConnectionOptions(
        autocommit=True, row_factory=dict_row, prepare_threshold=settings.prepare_threshold, **_KEEPALIVES
    )


# When a connection was last given back to its pool. A connection that finished a query
# a moment ago is alive; checking it again costs a round trip per checkout (about 10 per
# run, ~15% of a run's time measured in-process), so only connections idle for longer
# than FRESH_SECONDS are checked.
FRESH_SECONDS = 2.0
_returned_at: weakref.WeakKeyDictionary[AsyncConnection[Any], float] = weakref.WeakKeyDictionary()


async def check_unless_fresh(conn: AsyncConnection[Any]) -> None:
    """Check a connection before it is handed out, unless it was returned moments ago."""
    if time.monotonic() - _returned_at.get(conn, float("-inf")) < FRESH_SECONDS:
        return
    await AsyncConnectionPool.check_connection(conn)


async def note_returned(conn: AsyncConnection[Any]) -> None:
    """Remember when a connection came back to its pool."""
    _returned_at[conn] = time.monotonic()


async def resolve_database_url(settings: Settings) -> str:
    """Return the configured database URL, starting the embedded Postgres when none is set."""
    if settings.database_url:
        return settings.database_url
    return await asyncio.to_thread(start_embedded_postgres, settings.embedded_pg_dir)


def make_pool(conninfo: str, settings: Settings, *, name: str, min_size: int, max_size: int) -> Pool:
    """Build (not open) a pool with the service's connection options.

    No pooled connection ever holds a session advisory lock: thread and user locks live on
    the sessions of `Locks` (db/locks.py) and `migrate` takes its lock on a connection of its
    own, so a connection coming back needs no `pg_advisory_unlock_all()` round trip.
    """
    # An outage answers within `pool_timeout_seconds`; a queue of a live Postgres is waited
    # out; `check` runs at checkout, and a connection that fails it has the idle ones swept
    # at once (db/patient_pool.py).
    return PatientPool(
        conninfo,
        outage_after=settings.pool_timeout_seconds,
        kwargs=connection_kwargs(settings),
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        check=check_unless_fresh,
        reset=note_returned,
        max_idle=settings.pool_max_idle_seconds,
    )


@asynccontextmanager
async def open_pool(settings: Settings, *, max_size: int | None = None) -> AsyncIterator[Pool]:
    """Open the main pool for a command-line tool and close it afterwards."""
    conninfo = await resolve_database_url(settings)
    size = max_size or min(settings.pool_max_size, 4)
    # One plain connection first: an unreachable Postgres then fails the command at once,
    # with psycopg's own error, instead of after the pool's wait for its first connection.
    probe = await AsyncConnection.connect(conninfo, connect_timeout=CLI_CONNECT_TIMEOUT_SECONDS)
    await probe.close()
    pool = make_pool(conninfo, settings, name="cli", min_size=1, max_size=size)
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()
