"""A connection pool that tells an outage from a queue.

Two promises pull a pool's acquisition timeout apart. During an outage every request
must answer `503` within about `CHATBOT_POOL_TIMEOUT_SECONDS` (the contract: within 3 s),
so a short timeout. During a burst (hundreds of runs admitted at once on a pool of 16)
requests queue for connections for seconds while Postgres is perfectly healthy, and a
short timeout would refuse runs the replica can serve (measured: 500 in flight, nothing
refused). So a request that has waited `outage_after` seconds asks whether Postgres
answers at all, and only then decides: no answer is an outage (`PoolTimeout`, mapped to
`503`); an answer means a queue, and the request keeps its place in it for up to
`CONGESTED_WAIT_SECONDS`.

Whether Postgres answers is read first from the pool's own traffic: a connection that came
back whole while the request waited has just had its statement answered. Only when none
did (every connection held by something slow, or Postgres gone) does one shared probe
connect, bounded. The probe alone was not enough: during a burst the replica's event loop
is saturated (500 runs starting at once), so a fresh connection's several round trips miss
the probe's bound on the loop's clock while Postgres answers within milliseconds, and each
failed probe refused every request that asked within a second of it (on a Citus
coordinator, where statements take a hop longer and the queue is longer, 74 of 500 runs of
one replica: docs/scaling.md).

A restart of Postgres (or anything that cuts every session) leaves the idle connections
dead, unnoticed until one is checked out. psycopg_pool's own checkout loop discards a
connection that fails its check and then sleeps a backoff (1, 2, 4, 8, 16 s) before the
next: a replica idle with a dozen dead connections answered its first request `503`
after 32 s, though Postgres had been back for seconds (docs/measurements/reliability.md). So the check
runs here instead: a connection found dead (at checkout, or coming back broken) starts one
sweep that checks every idle connection and replaces the dead ones (`check()`), and the
request takes the next connection at once, without a backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from chatbot.db.connection_options import ConnectionOptions, without_rows

# How long a request may queue for a connection of a Postgres that answers.
CONGESTED_WAIT_SECONDS = 30.0
# Bound of the probe's connection attempt: outage_after + this stays under the 3 s an
# outage may take to answer, even when the host does not refuse but drops packets.
PROBE_TIMEOUT_SECONDS = 0.75
# A probe's verdict serves every request that asks within this long.
PROBE_FRESH_SECONDS = 1.0

log = logging.getLogger(__name__)

Check = Callable[[AsyncConnection[Any]], Awaitable[None]]


class PatientPool(AsyncConnectionPool[AsyncConnection[DictRow]]):
    """Wait in line while Postgres answers; give up after `outage_after` when it does not."""

    def __init__(
        self,
        conninfo: str,
        *,
        outage_after: float,
        kwargs: ConnectionOptions,
        check: Check | None = None,
        **options: Any,
    ) -> None:
        # `check` is not given to psycopg_pool: its checkout loop sleeps a backoff after
        # each connection that fails it (see the module's docstring); getconn runs it.
        super().__init__(conninfo, kwargs=dict(kwargs), timeout=CONGESTED_WAIT_SECONDS, **options)
        self._checkout_check = check
        self._sweep: asyncio.Task[None] | None = None
        self._probe_conninfo = conninfo
        # The probe connects with the pool's options, minus the one that shapes result rows.
        self._probe_options = without_rows(kwargs)
        self._probe_options["autocommit"] = True
        self._outage_after = outage_after
        self._probe: asyncio.Task[bool] | None = None
        self._probed_at = float("-inf")
        self._returning: set[asyncio.Task[None]] = set()
        # When a connection last came back whole from its borrower (monotonic clock).
        self._answered_at = float("-inf")

    async def getconn(self, timeout: float | None = None) -> AsyncConnection[DictRow]:
        """Return a checked connection; raise `PoolTimeout` on an outage or after a long queue."""
        # An explicit bound (tools, tests) is kept as asked. Otherwise the outage verdict is
        # due `outage_after` after the request began, however many dead connections it met.
        patient = timeout is None
        deadline = time.monotonic() + (self._outage_after if timeout is None else timeout)
        # While a sweep is under way, an idle connection it has not taken yet may be dead,
        # and one given back moments ago would be handed out unchecked.
        await self._await_sweep(deadline)
        # Each failed check discards a connection; after the sweep none of the idle ones is
        # dead, so more failures than the pool's size mean connections die as they are made.
        for _ in range(self.max_size + 2):
            conn = await self._checkout(deadline, patient)
            if self._checkout_check is None:
                return conn
            try:
                await self._checkout_check(conn)
            except Exception as exc:
                await self._discard(conn, exc, deadline)
                continue
            except BaseException:
                # Cancelled: give the connection back, unchecked (and unused: it says nothing
                # about Postgres answering).
                await super().putconn(conn)
                raise
            return conn
        raise PoolTimeout(f"every connection of pool {self.name!r} failed its check")

    async def _discard(self, conn: AsyncConnection[DictRow], exc: Exception, deadline: float) -> None:
        """Drop a connection that failed its check, and sweep the idle ones it likely shared its fate with."""
        log.warning("pooled connection failed its check", extra={"pool": self.name, "error": type(exc).__name__})
        # Closed, it cannot go back to the pool: putconn discards it and asks for a new one.
        with contextlib.suppress(Exception):
            await conn.close()
        await self.putconn(conn)
        # Waited for (it is quick: a dead connection fails its check at once) so the next
        # checkout meets no dead connection; bounded by the request's deadline, so an outage
        # still answers in time.
        self._start_sweep()
        await self._await_sweep(deadline)

    async def _await_sweep(self, deadline: float) -> None:
        if self._sweep is None or self._sweep.done():
            return
        if (bound := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._sweep), bound)

    async def putconn(self, conn: AsyncConnection[DictRow]) -> None:
        """Give a connection back; one that came back broken starts a sweep of its idle siblings."""
        broken = conn.broken
        if not broken and not conn.closed:
            self._answered_at = time.monotonic()
        await super().putconn(conn)
        if broken and not self.closed:
            self._start_sweep()

    def _start_sweep(self) -> None:
        # One sweep at a time, whoever noticed; it is never cancelled, since `check()` holds
        # the idle connections it has taken out of the pool until it has checked them.
        if self._sweep is None or self._sweep.done():
            self._sweep = asyncio.create_task(self._sweep_idle(), name=f"pool-sweep-{self.name}")

    async def _sweep_idle(self) -> None:
        try:
            await self.check()
        except Exception:  # a sweep that failed leaves the checkout checks to find the rest
            log.warning("sweeping the pool's idle connections failed", extra={"pool": self.name}, exc_info=True)

    async def close(self, timeout: float = 5.0) -> None:
        """Close the pool, after a sweep under way has put back what it took out."""
        if self._sweep is not None and not self._sweep.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._sweep), timeout)
        await super().close(timeout)

    async def _checkout(self, deadline: float, patient: bool) -> AsyncConnection[DictRow]:
        """Return an unchecked connection; raise `PoolTimeout` on an outage or after a long queue."""
        # Past the deadline psycopg_pool refuses even an idle connection (timeout 0), and a
        # patient request goes straight to the probe's verdict.
        bound = max(0.0, deadline - time.monotonic())
        if not patient:
            return await super().getconn(bound)
        since = deadline - self._outage_after  # when this request began to wait
        if getattr(self, "_pool", None):
            # An idle connection is ready (psycopg_pool's private deque; if it goes, every
            # call takes the path below): no queue to keep a place in, so no task to watch it.
            try:
                return await super().getconn(bound)
            except PoolTimeout:
                if not await self._postgres_answers(since):
                    raise
                return await super().getconn()
        waiting = asyncio.ensure_future(super().getconn())
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), bound)
        except TimeoutError:
            pass
        except BaseException:
            self._abandon(waiting)
            raise
        if await self._postgres_answers(since):
            return await waiting  # keeps its place in the queue; a cancel reaches it too
        self._abandon(waiting)
        raise PoolTimeout(f"Postgres did not answer within {self._outage_after:.1f} s")

    def _abandon(self, waiting: asyncio.Future[AsyncConnection[DictRow]]) -> None:
        # A wait still queued is cancelled (the pool takes back a connection it was being
        # given); one that got its connection meanwhile gives it back.
        if not waiting.done():
            waiting.cancel()
        elif not waiting.cancelled() and waiting.exception() is None:
            # Unused, so not taken for Postgres answering (putconn would note it).
            task = asyncio.ensure_future(super().putconn(waiting.result()))
            self._returning.add(task)
            task.add_done_callback(self._returning.discard)

    async def _postgres_answers(self, since: float) -> bool:
        """Tell whether Postgres answers: a connection came back whole since `since`, or a probe connects."""
        if self._answered_at >= since:
            return True
        now = time.monotonic()
        if self._probe is None or (self._probe.done() and now - self._probed_at > PROBE_FRESH_SECONDS):
            self._probed_at = now
            self._probe = asyncio.ensure_future(self._connect_once())
        return await asyncio.shield(self._probe)

    async def _connect_once(self) -> bool:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                conn = await AsyncConnection.connect(self._probe_conninfo, **self._probe_options)
        except (psycopg.Error, OSError, TimeoutError):
            return False
        await conn.close()
        return True
