"""The pool waits in line while Postgres answers, and gives up fast when it does not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from psycopg_pool import PoolTimeout

from chatbot.db.patient_pool import PatientPool
from chatbot.db.pool import Pool, make_pool
from tests.fixtures.postgres import settings_for
from tests.fixtures.wait import wait_until

OUTAGE_AFTER = 0.3


@asynccontextmanager
async def _one_connection_pool(url: str, name: str) -> AsyncIterator[Pool]:
    """Yield an open pool of one connection that gives a request up after OUTAGE_AFTER without an answer."""
    settings = settings_for(url, pool_timeout_seconds=OUTAGE_AFTER)
    pool = make_pool(url, settings, name=name, min_size=1, max_size=1)
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


async def test_a_request_queued_past_the_outage_bound_still_gets_a_connection(migrated_database_url: str) -> None:
    async with _one_connection_pool(migrated_database_url, "patient") as pool:
        async with pool.connection() as busy:
            queued = asyncio.create_task(_borrow_and_ask(pool))
            # Hold the only connection until the queued request has waited past the outage
            # bound and asked whether Postgres answers (a request asks only then): a pool with
            # a plain 0.3 s timeout would have refused it (PoolTimeout -> 503).
            await wait_until(lambda: _probed(pool) is True, what="the queued request to pass the bound")
            assert not queued.done()
            await busy.execute("select 1")
        assert await queued == 1


def _probed(pool: Pool) -> bool | None:
    """Return the verdict of the pool's probe of Postgres (None while none has answered)."""
    assert isinstance(pool, PatientPool)
    probe = pool._probe
    return probe.result() if probe is not None and probe.done() else None


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
        # Given up on the probe's verdict after the bound, not after the 30 s a queue may wait
        # (that refusal is psycopg_pool's own, worded otherwise).
        with pytest.raises(PoolTimeout, match=f"Postgres did not answer within {OUTAGE_AFTER:.1f} s"):
            async with pool.connection():
                pass
        assert _probed(pool) is False
    finally:
        await pool.close()


async def _probe_fails() -> bool:
    return False


async def test_a_queue_that_moves_is_waited_out_when_the_probe_cannot_connect(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A probe that misses its bound while Postgres answers: what a replica's event loop,
    # saturated by a burst of runs, does to a fresh connection's round trips. Connections
    # coming back from their statements are the answer then.
    async with _one_connection_pool(migrated_database_url, "moving") as pool:
        monkeypatch.setattr(pool, "_connect_once", _probe_fails)
        # Ten requests on one connection, each holding it a third of the outage bound: the
        # last ones wait three times the bound, while a connection comes back every 0.1 s.
        answers = await asyncio.gather(*(_borrow_and_hold(pool, OUTAGE_AFTER / 3) for _ in range(10)))
        assert answers == [1] * 10


async def test_a_queue_that_stands_still_is_an_outage_when_the_probe_cannot_connect(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _one_connection_pool(migrated_database_url, "still") as pool:
        monkeypatch.setattr(pool, "_connect_once", _probe_fails)
        assert await _borrow_and_ask(pool) == 1  # came back whole, before the request below waits
        async with pool.connection():  # held, and never answered while the request waits
            with pytest.raises(PoolTimeout):
                await _borrow_and_ask(pool)


async def _borrow_and_hold(pool: object, seconds: float) -> int:
    async with pool.connection() as conn:  # type: ignore[attr-defined]
        row = await (await conn.execute("select 1 as one")).fetchone()
        await asyncio.sleep(seconds)  # not polling: holds the connection, as a slow statement would
        return int(row["one"])
