"""The pool waits in line while Postgres answers, and gives up fast when it does not."""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg_pool import PoolTimeout

from chatbot.db.pool import make_pool
from tests.fixtures.postgres import settings_for

OUTAGE_AFTER = 0.3


async def test_a_request_queued_past_the_outage_bound_still_gets_a_connection(migrated_database_url: str) -> None:
    settings = settings_for(migrated_database_url, pool_timeout_seconds=OUTAGE_AFTER)
    pool = make_pool(migrated_database_url, settings, name="patient", min_size=1, max_size=1)
    await pool.open(wait=True)
    try:
        async with pool.connection() as busy:
            queued = asyncio.create_task(_borrow_and_ask(pool))
            # Hold the only connection three times as long as the outage bound: a pool with a
            # plain 0.3 s timeout would refuse the queued request (PoolTimeout -> 503).
            await asyncio.sleep(3 * OUTAGE_AFTER)
            await busy.execute("select 1")
        assert await queued == 1
    finally:
        await pool.close()


async def _borrow_and_ask(pool: object) -> int:
    async with pool.connection() as conn:  # type: ignore[attr-defined]
        row = await (await conn.execute("select 1 as one")).fetchone()
        return int(row["one"])


async def test_a_request_to_a_postgres_that_does_not_answer_gives_up_after_the_bound() -> None:
    # Nothing listens on this socket directory: every connection attempt fails at once.
    url = "postgresql://nobody@/nothing?host=/nonexistent-socket-dir"
    settings = settings_for(url, pool_timeout_seconds=OUTAGE_AFTER)
    pool = make_pool(url, settings, name="outage", min_size=0, max_size=1)
    await pool.open(wait=False)
    try:
        started = time.monotonic()
        with pytest.raises(PoolTimeout):
            async with pool.connection():
                pass
        # Given up after the bound (plus the probe), far below the 30 s a queue may wait.
        assert time.monotonic() - started < 5
    finally:
        await pool.close()
