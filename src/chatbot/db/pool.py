"""The connection pools: one for the graph and the API, one small for run locks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from chatbot.config import Settings
from chatbot.db.embedded import start_embedded_postgres

Pool = AsyncConnectionPool[AsyncConnection[dict[str, Any]]]

# Long model calls leave connections idle; keepalives notice a dead peer, and `max_idle`
# (below any server/proxy idle timeout) retires connections before they are cut.
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}


def connection_kwargs(settings: Settings) -> dict[str, Any]:
    """Return the connection options every pooled connection uses."""
    # autocommit: the checkpointer's setup builds indexes CONCURRENTLY and every statement
    # of ours is its own transaction unless it opens one explicitly.
    return {
        "autocommit": True,
        "row_factory": dict_row,
        "prepare_threshold": settings.prepare_threshold,
        **_KEEPALIVES,
    }


async def release_advisory_locks(conn: AsyncConnection[Any]) -> None:
    """Drop session advisory locks before a connection goes back to the pool.

    A session lock outlives the code that took it; a connection returned with one held
    would keep a thread (or the migration lock) locked for whoever borrows it next.
    """
    await conn.execute("select pg_advisory_unlock_all()")


async def resolve_database_url(settings: Settings) -> str:
    """Return the configured database URL, starting the embedded Postgres when none is set."""
    if settings.database_url:
        return settings.database_url
    return await asyncio.to_thread(start_embedded_postgres, settings.embedded_pg_dir)


def make_pool(conninfo: str, settings: Settings, *, name: str, min_size: int, max_size: int) -> Pool:
    """Build (not open) a pool with the service's connection options."""
    return AsyncConnectionPool(
        conninfo,
        kwargs=connection_kwargs(settings),
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        check=AsyncConnectionPool.check_connection,
        reset=release_advisory_locks,
        max_idle=settings.pool_max_idle_seconds,
        timeout=10.0,
    )


@asynccontextmanager
async def open_pool(settings: Settings, *, max_size: int | None = None) -> AsyncIterator[Pool]:
    """Open the main pool for a command-line tool and close it afterwards."""
    conninfo = await resolve_database_url(settings)
    size = max_size or min(settings.pool_max_size, 4)
    pool = make_pool(conninfo, settings, name="cli", min_size=1, max_size=size)
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()
