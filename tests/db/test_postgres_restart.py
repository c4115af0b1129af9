"""Postgres restarted while the replica's connections sat idle: the first request after it is served.

A fast restart (`pg_ctl -m fast`) cuts every session, and Postgres answers again a moment
later. The pool's idle connections and the lock sessions are then dead, though nothing has
noticed yet. The first checkout after the restart must reach the live server at once, not
walk the dead connections one by one (it answered 503 after 32 s; docs/measurements/reliability.md).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from chatbot.db.locks import Locks
from chatbot.db.pool import FRESH_SECONDS, Pool, connection_kwargs, make_pool
from chatbot.ids import ThreadId
from tests.fixtures.postgres import settings_for
from tests.fixtures.stoppable_postgres import StoppablePostgres
from tests.fixtures.wait import wait_until

# Generous: a pool that reaches the live server answers in milliseconds; the bug took 32 s.
ANSWER_WITHIN_SECONDS = 10.0
CONCURRENT = 12


async def _select_one(pool: Pool, hold: float = 0.0) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("select 1 as one, pg_sleep(%s)", (hold,))).fetchone()
        assert row is not None
        return int(row["one"])


async def _timed(work: Any) -> tuple[float, Any]:
    started = time.monotonic()
    try:
        result: Any = await asyncio.wait_for(work, ANSWER_WITHIN_SECONDS)
    except Exception as exc:  # reported with the time it took, below
        result = exc
    return time.monotonic() - started, result


async def test_the_first_checkout_after_a_restart_of_an_idle_pool_gets_a_live_connection(
    stoppable_postgres: StoppablePostgres,
) -> None:
    url = stoppable_postgres.database_url
    settings = settings_for(url, pool_min_size=2, pool_max_size=16)
    pool = make_pool(url, settings, name="restart", min_size=2, max_size=16)
    await pool.open(wait=True)
    try:
        # A dozen connections in use at once, then idle past the freshness window, so each
        # is checked before it is handed out (db/pool.py: check_unless_fresh).
        for _ in range(2):
            await asyncio.gather(*(_select_one(pool, hold=0.2) for _ in range(CONCURRENT)))
        # Given back by the pool's worker after their reset, which notes the moment (db/pool.py).
        await wait_until(lambda: pool.get_stats()["pool_available"] >= CONCURRENT, what="the connections back")
        idle_since = time.monotonic()
        await wait_until(lambda: time.monotonic() - idle_since > FRESH_SECONDS, what="the freshness window to pass")

        stoppable_postgres.stop()
        stoppable_postgres.start()

        took, first = await _timed(_select_one(pool))
        print(f"\nfirst checkout after the restart: {took:.3f} s, {first!r}")
        assert first == 1, f"the first checkout after the restart failed after {took:.1f} s: {first!r}"
        # And the next dozen at once: no dead connection is left to hand out.
        took, rest = await _timed(asyncio.gather(*(_select_one(pool, hold=0.1) for _ in range(CONCURRENT))))
        assert rest == [1] * CONCURRENT, f"after {took:.1f} s: {rest!r}"
        assert pool.get_stats()["pool_size"] <= 16  # the connection budget holds
    finally:
        await pool.close()


async def test_a_lock_session_cut_by_a_restart_reconnects_for_the_next_lock(
    stoppable_postgres: StoppablePostgres,
) -> None:
    url = stoppable_postgres.database_url
    # Not opened: no watcher pings the session, as when a request arrives before the next
    # ping (one a second) has noticed that the restart cut it.
    locks = Locks(url, connection_kwargs(settings_for(url)), sessions=1)
    try:
        held = await locks.try_thread(ThreadId("t-held"))
        assert held is not None
        released = await locks.try_thread(ThreadId("t-released"))
        assert released is not None
        await released.release()

        stoppable_postgres.stop()
        stoppable_postgres.start()

        took, again = await _timed(locks.try_thread(ThreadId("t-released")))
        assert again is not None and not isinstance(again, Exception), f"after {took:.1f} s: {again!r}"
        assert not again.lost
        # The lock held across the restart went with its session: reported lost, free again.
        assert held.lost
        await held.release()
        retaken = await locks.try_thread(ThreadId("t-held"))
        assert retaken is not None
        await retaken.release()
        await again.release()
    finally:
        await locks.close()
