"""A connection pool that tells an outage from a queue.

Two promises pull a pool's acquisition timeout apart. During an outage every request
must answer `503` within about `CHATBOT_POOL_TIMEOUT_SECONDS` (the contract: within 3 s),
so a short timeout. During a burst (hundreds of runs admitted at once on a pool of 16)
requests queue for connections for seconds while Postgres is perfectly healthy, and a
short timeout would refuse runs the replica can serve (issue 10: 500 in flight, nothing
refused). So a request that has waited `outage_after` seconds asks whether Postgres
answers at all (one shared probe: a fresh connection, bounded), and only then decides:
no answer is an outage (`PoolTimeout`, mapped to `503`); an answer means a queue, and
the request keeps its place in it for up to `CONGESTED_WAIT_SECONDS`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

# How long a request may queue for a connection of a Postgres that answers.
CONGESTED_WAIT_SECONDS = 30.0
# Bound of the probe's connection attempt: outage_after + this stays under the 3 s an
# outage may take to answer, even when the host does not refuse but drops packets.
PROBE_TIMEOUT_SECONDS = 0.75
# A probe's verdict serves every request that asks within this long.
PROBE_FRESH_SECONDS = 1.0


class PatientPool(AsyncConnectionPool[AsyncConnection[dict[str, Any]]]):
    """Wait in line while Postgres answers; give up after `outage_after` when it does not."""

    def __init__(self, conninfo: str, *, outage_after: float, kwargs: dict[str, Any], **options: Any) -> None:
        super().__init__(conninfo, kwargs=kwargs, timeout=CONGESTED_WAIT_SECONDS, **options)
        self._probe_conninfo = conninfo
        # The probe connects with the pool's options, minus those that shape result rows.
        self._probe_options = {k: v for k, v in kwargs.items() if k not in ("row_factory", "autocommit")}
        self._outage_after = outage_after
        self._probe: asyncio.Task[bool] | None = None
        self._probed_at = float("-inf")
        self._returning: set[asyncio.Task[None]] = set()

    async def getconn(self, timeout: float | None = None) -> AsyncConnection[dict[str, Any]]:
        """Return a connection; raise `PoolTimeout` on an outage or after a long queue."""
        if timeout is not None:  # an explicit bound (tools, tests) is kept as asked
            return await super().getconn(timeout)
        if getattr(self, "_pool", None):
            # An idle connection is ready (psycopg_pool's private deque; if it goes, every
            # call takes the path below): no queue to keep a place in, so no task to watch it.
            try:
                return await super().getconn(self._outage_after)
            except PoolTimeout:
                if not await self._postgres_answers():
                    raise
                return await super().getconn()
        waiting = asyncio.ensure_future(super().getconn())
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), self._outage_after)
        except TimeoutError:
            pass
        except BaseException:
            self._abandon(waiting)
            raise
        if await self._postgres_answers():
            return await waiting  # keeps its place in the queue; a cancel reaches it too
        self._abandon(waiting)
        raise PoolTimeout(f"Postgres did not answer within {self._outage_after:.1f} s")

    def _abandon(self, waiting: asyncio.Future[AsyncConnection[dict[str, Any]]]) -> None:
        # A wait still queued is cancelled (the pool takes back a connection it was being
        # given); one that got its connection meanwhile gives it back.
        if not waiting.done():
            waiting.cancel()
        elif not waiting.cancelled() and waiting.exception() is None:
            task = asyncio.ensure_future(self.putconn(waiting.result()))
            self._returning.add(task)
            task.add_done_callback(self._returning.discard)

    async def _postgres_answers(self) -> bool:
        now = time.monotonic()
        if self._probe is None or (self._probe.done() and now - self._probed_at > PROBE_FRESH_SECONDS):
            self._probed_at = now
            self._probe = asyncio.ensure_future(self._connect_once())
        return await asyncio.shield(self._probe)

    async def _connect_once(self) -> bool:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                conn = await AsyncConnection.connect(self._probe_conninfo, autocommit=True, **self._probe_options)
        except (psycopg.Error, OSError, TimeoutError):
            return False
        await conn.close()
        return True
