"""The sweeps inside the replicas: old threads and expired budget holds go without a command.

Every replica runs a `RetentionSweeper` when `CHATBOT_RETENTION_DAYS` is set. It wakes a
few times per `CHATBOT_RETENTION_SWEEP_MINUTES` and tries the sweep's lease (ops/_lease.py):
one replica at a time sweeps, and the replicas together sweep about once per interval.
The pass itself is `chatbot retention`'s (ops/retention.py): in batches, skipping threads
with a run in flight, a thread's feedback with it. Each sweep leaves one JSON log line and
its metrics; a failed sweep (say, Postgres went away) is logged and tried again later.

Every replica also runs a `BudgetSweeper`: every `CHATBOT_BUDGET_SWEEP_SECONDS`, one replica
at a time (its own lease) deletes the budget holds that expired (a killed replica's or
command's: they stopped counting at their expiry), so the tables keep only live holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from prometheus_client import Counter, Histogram

from chatbot.budgets.admin import sweep_expired
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool
from chatbot.ops._lease import MaintenanceLease, MaintenanceLeaseLost, replica_name
from chatbot.ops.retention import RetentionReport, purge_stale_threads
from chatbot.tasks import stop_task

log = logging.getLogger(__name__)

SWEEPS = Counter("chatbot_retention_sweeps_total", "Retention sweeps run by this replica, by outcome.", ["outcome"])
THREADS_DELETED = Counter("chatbot_retention_threads_deleted_total", "Threads deleted by retention sweeps.")
THREADS_SKIPPED = Counter(
    "chatbot_retention_threads_skipped_total", "Stale threads a sweep skipped because a run was in flight."
)
SWEEP_SECONDS = Histogram(
    "chatbot_retention_sweep_duration_seconds",
    "Wall time of a retention sweep.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
)
for _outcome in ("completed", "failed", "lease_lost"):
    SWEEPS.labels(_outcome)

LEASE_NAME = "retention"
# A holder renews before each batch (a batch takes well under a second); a killed holder's
# lease runs out after this long and another replica takes over.
LEASE_SECONDS = 300.0
# Replicas wake this many times per interval, so a sweep is at most a quarter late.
WAKES_PER_INTERVAL = 4
# Thread locks one sweep holds at once: each takes a lock-pool connection a run may need.
MAX_LOCKS = 8


class _PeriodicSweep:
    """A sweep a replica runs in the background, a few times per interval, until stopped."""

    what = "sweep"
    """How its task and its log lines name it."""
    interval: float
    """Seconds between two sweeps, across the replicas together."""
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the background loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name=self.what)

    async def stop(self) -> None:
        """Stop the loop; a sweep in progress stops between statements and gives its lease back."""
        task, self._task = self._task, None
        await stop_task(task)

    async def sweep_once(self) -> object:
        """Sweep now if this replica gets the lease and a sweep is due."""
        raise NotImplementedError

    async def _loop(self) -> None:
        period = self.interval / WAKES_PER_INTERVAL
        # Replicas started together wake at different moments.
        await asyncio.sleep(period * random.random())
        while True:
            try:
                await self.sweep_once()
            except Exception:  # Postgres away, a bug: logged, and the next wake tries again
                log.warning("%s could not run", self.what, exc_info=True)
            await asyncio.sleep(period * (0.75 + random.random() / 2))


class RetentionSweeper(_PeriodicSweep):
    """The background task of one replica that deletes threads idle for longer than `days`."""

    what = "retention-sweeper"

    def __init__(
        self,
        *,
        pool: Pool,
        locks: Locks,
        days: float,
        interval_minutes: float,
        batch_size: int = 200,
        holder: str | None = None,
    ) -> None:
        self.pool = pool
        self.locks = locks
        self.days = days
        self.interval = interval_minutes * 60
        self.batch_size = batch_size
        self.lease = MaintenanceLease(
            pool,
            LEASE_NAME,
            holder=holder or replica_name(),
            lease_seconds=LEASE_SECONDS,
            every_seconds=self.interval,
        )

    async def sweep_once(self) -> RetentionReport | None:
        """Sweep now if this replica gets the lease and a sweep is due; None when it did not sweep."""
        if not await self.lease.acquire():
            return None
        started = time.perf_counter()
        cutoff = datetime.now(UTC) - timedelta(days=self.days)
        try:
            report = await purge_stale_threads(
                self.pool,
                self.locks,
                cutoff,
                batch_size=self.batch_size,
                max_locks=MAX_LOCKS,
                before_batch=self.lease.renew,
            )
        except MaintenanceLeaseLost:
            SWEEPS.labels("lease_lost").inc()
            log.warning("retention sweep lost its lease", extra={"holder": self.lease.holder})
            return None
        except BaseException:
            SWEEPS.labels("failed").inc()
            # Shielded: a sweep cancelled at shutdown still frees the lease for the others.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.lease.give_up())
            raise
        await self.lease.finish()
        seconds = time.perf_counter() - started
        SWEEPS.labels("completed").inc()
        THREADS_DELETED.inc(report.deleted)
        THREADS_SKIPPED.inc(report.skipped_in_flight)
        SWEEP_SECONDS.observe(seconds)
        log.info(
            "retention sweep",
            extra={
                "holder": self.lease.holder,
                "older_than_days": self.days,
                "threads_stale": report.stale,
                "threads_deleted": report.deleted,
                "threads_skipped_in_flight": report.skipped_in_flight,
                "duration_ms": round(seconds * 1000, 1),
            },
        )
        return report


BUDGET_LEASE_NAME = "budget_holds"
BUDGET_HOLDS_SWEPT = Counter("chatbot_budget_holds_swept_total", "Expired budget holds deleted by the sweep.")


class BudgetSweeper(_PeriodicSweep):
    """The background task of one replica that deletes expired budget holds, one replica at a time."""

    what = "budget-sweeper"

    def __init__(
        self,
        *,
        pool: Pool,
        interval_seconds: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        holder: str | None = None,
    ) -> None:
        self.pool = pool
        self.interval = interval_seconds
        self.clock = clock
        """The budgets' clock: a hold expires by the clock that wrote its expiry."""
        # A sweep is one short statement per tenant: two intervals outlive it, and a killed
        # holder's lease runs out soon enough for the sweep to keep its interval.
        self.lease = MaintenanceLease(
            pool,
            BUDGET_LEASE_NAME,
            holder=holder or replica_name(),
            lease_seconds=max(1.0, 2 * interval_seconds),
            every_seconds=interval_seconds,
        )

    async def sweep_once(self) -> int | None:
        """Sweep now if this replica gets the lease and a sweep is due; None when it did not sweep."""
        if not await self.lease.acquire():
            return None
        try:
            swept = await sweep_expired(self.pool, self.clock())
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.lease.give_up())
            raise
        await self.lease.finish()
        BUDGET_HOLDS_SWEPT.inc(swept)
        if swept:
            log.info("budget holds swept", extra={"holds": swept})
        return swept
