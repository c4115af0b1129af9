"""The retention sweep inside the replicas: one replica at a time, old threads only, busy ones skipped."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from chatbot.db.locks import Lease, Locks
from chatbot.db.pool import connection_kwargs
from chatbot.ids import ThreadId
from chatbot.ops.sweeper import RetentionSweeper
from tests.fixtures.app import Replica, running_app, services_of
from tests.fixtures.messages import send_for_events
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

SECONDS_PER_DAY = 86400
RETENTION = 0.5  # seconds, in the sweepers built by the tests


def threads(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("select distinct thread_id from checkpoints").fetchall()}


def feedback_threads(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("select thread_id from run_feedback").fetchall()}


async def turn(client: httpx.AsyncClient, thread: str) -> str:
    """Run one turn; return its run id."""
    return str((await send_for_events(client, thread, "hello"))[0][1]["run_id"])


@asynccontextmanager
async def thread_held(url: str, thread: str) -> AsyncIterator[Lease]:
    """Hold a thread's run lock from outside, as a run in flight on some replica would."""
    locks = Locks(url, connection_kwargs(settings_for(url)), sessions=1)
    try:
        lease = await locks.try_thread(ThreadId(thread))
        assert lease is not None
        try:
            yield lease
        finally:
            await lease.release()
    finally:
        await locks.close()


async def test_two_replicas_sweep_old_threads_one_at_a_time_skipping_busy_ones(
    isolated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = isolated_database_url
    caplog.set_level(logging.INFO, logger="chatbot.ops.sweeper")
    # Threads idle for 2 s are old; each replica wakes every 0.15 s or so.
    lifecycle: dict[str, Any] = {"retention_days": 2 / SECONDS_PER_DAY, "retention_sweep_minutes": 0.01}
    async with running_app(url, **lifecycle) as replica_a, running_app(url, **lifecycle) as replica_b:
        run_id = await turn(replica_a, "old-1")
        rated = await replica_a.post(f"/v1/threads/old-1/runs/{run_id}/feedback", json={"score": "up"}, headers=auth())
        assert rated.status_code == 204
        await turn(replica_b, "old-2")
        await turn(replica_a, "busy")
        async with thread_held(url, "busy"):
            await wait_until(
                lambda: "old-1" not in threads(url) and "old-2" not in threads(url),
                what="the old threads swept",
                timeout=60,
            )
            assert "busy" in threads(url)  # a run is in flight on it: skipped, however old
            assert "old-1" not in feedback_threads(url)  # feedback went with its thread
            await wait_until(
                lambda: any(getattr(r, "threads_skipped_in_flight", 0) for r in sweeps(caplog)),
                what="a sweep that skipped the busy thread",
                timeout=60,
            )
        await wait_until(lambda: "busy" not in threads(url), what="the freed thread swept", timeout=60)
        # A sweep logs its line after its deletions commit: wait for it before stopping the replicas.
        await wait_until(
            lambda: sum(getattr(r, "threads_deleted", 0) for r in sweeps(caplog)) >= 3,
            what="the last sweep's log line",
            timeout=10,
        )
        metrics = (await replica_b.get("/metrics")).text
    lines = sweeps(caplog)
    holders = {r.holder for r in lines}  # type: ignore[attr-defined]
    sweepers = [services_of(replica_a).retention, services_of(replica_b).retention]
    assert holders <= {s.lease.holder for s in sweepers if s is not None}
    assert sum(r.threads_deleted for r in lines) == 3  # type: ignore[attr-defined]
    # One at a time: no sweep began before the previous one had finished.
    spans = sorted((r.created - r.duration_ms / 1000, r.created) for r in lines)  # type: ignore[attr-defined]
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    assert _counter(metrics, "chatbot_retention_threads_deleted_total") >= 3
    assert _counter(metrics, "chatbot_retention_threads_skipped_total") >= 1
    assert _counter(metrics, 'chatbot_retention_sweeps_total{outcome="completed"}') >= len(lines)


def sweeps(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Return the per-sweep log records captured so far."""
    return [r for r in caplog.records if r.name == "chatbot.ops.sweeper" and r.getMessage() == "retention sweep"]


def _counter(metrics: str, sample: str) -> float:
    """Return a sample's value from a /metrics page (name with its labels, as printed)."""
    return sum(float(line.split()[1]) for line in metrics.splitlines() if line.split()[:1] == [sample])


async def older_than(written: datetime, seconds: float) -> None:
    """Wait until what was written by `written` is older than `seconds` (a checkpoint's age is its id's time)."""
    moment = written + timedelta(seconds=seconds)
    await wait_until(lambda: datetime.now(UTC) > moment, what=f"the threads to be older than {seconds} s")


async def test_a_held_lease_keeps_every_replica_from_sweeping_until_it_runs_out(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url) as client:  # no retention setting: no sweeper of its own
        assert services_of(client).retention is None
        for thread in ("t-1", "t-2", "t-3"):
            await turn(client, thread)
        await older_than(datetime.now(UTC), RETENTION)
        pool, locks = services_of(client).pool, services_of(client).locks
        replicas = [
            RetentionSweeper(pool=pool, locks=locks, days=RETENTION / SECONDS_PER_DAY, interval_minutes=60, holder=name)
            for name in ("replica-x", "replica-y")
        ]
        async with pool.connection() as conn:  # a third replica is sweeping
            await conn.execute(
                "insert into maintenance_leases (name, holder, lease_until) values ('retention', 'replica-z', %s)",
                (datetime.now().astimezone() + timedelta(hours=1),),
            )
        assert await asyncio.gather(*(r.sweep_once() for r in replicas)) == [None, None]
        assert threads(url) == {"t-1", "t-2", "t-3"}
        async with pool.connection() as conn:  # ...and was killed: its lease runs out
            await conn.execute("update maintenance_leases set lease_until = now() - interval '1 second'")
        reports = await asyncio.gather(*(r.sweep_once() for r in replicas))
        done = [r for r in reports if r is not None]
        assert len(done) == 1 and done[0].deleted == 3  # exactly one of the two swept
        assert threads(url) == set()
        # The sweep is not due again before its interval has passed, on any replica.
        await turn(client, "t-4")
        await older_than(datetime.now(UTC), RETENTION)  # old enough: only the interval keeps it
        assert await asyncio.gather(*(r.sweep_once() for r in replicas)) == [None, None]
        assert threads(url) == {"t-4"}


async def test_real_replicas_sweep_threads_and_expire_memory_from_their_settings(
    migrated_database_url: str, replicas: Callable[..., Replica]
) -> None:
    url = migrated_database_url
    lifecycle = {
        "CHATBOT_RETENTION_DAYS": "0.00003",  # about 2.6 s
        "CHATBOT_RETENTION_SWEEP_MINUTES": "0.01",
        "CHATBOT_MEMORY_TTL_DAYS": "0.00003",
        "CHATBOT_MEMORY_TTL_SWEEP_MINUTES": "0.01",
    }
    a, b = replicas(**lifecycle), replicas(**lifecycle)
    headers = auth(user="replica-user", locale="en-US")
    async with httpx.AsyncClient(base_url=a.base_url, timeout=30) as client:
        body = {"message": {"content": "remember that I live in Yazd"}}
        assert (await client.post("/v1/threads/replica-old/runs", json=body, headers=headers)).status_code == 200
    assert "replica-old" in threads(url)
    await wait_until(lambda: store_items(url, "replica-user"), what="the user's memory written", timeout=10)
    # Nobody touches either again: a replica's sweep deletes the thread, a store sweeper the memory.
    await wait_until(
        lambda: "replica-old" not in threads(url) and not store_items(url, "replica-user"),
        what="the thread and the memory swept",
        timeout=60,
    )
    async with httpx.AsyncClient(base_url=b.base_url, timeout=30) as client:
        memory = (await client.get("/v1/users/replica-user/memory", headers=headers)).json()
    assert memory["facts"] == [] and memory["profile"] == {}


def store_items(url: str, user: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("select key from store where prefix like %s", (f"acme.user.{user}.%",)).fetchall()
    return [r[0] for r in rows]
