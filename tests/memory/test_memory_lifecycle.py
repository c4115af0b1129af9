"""A memory reset across replicas, and memory that expires when nobody uses it."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
import psycopg

from chatbot.memory.extraction import MemoryCandidates
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.writer import offline_extractor
from tests.fixtures.app import running_app, services_of
from tests.fixtures.tokens import Caller
from tests.fixtures.wait import wait_until
from tests.memory.test_memory_e2e import memory_of, say, wait_for_fact

EN: Caller = {"locale": "en-US"}
SECONDS_PER_DAY = 86400


def store_rows(url: str, user: str) -> list[tuple[str, str, datetime | None]]:
    """Return (prefix, key, expires_at) of every store item of `user` in tenant acme."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select prefix, key, expires_at from store where prefix like %s order by prefix, key",
            (f"acme.user.{user}.%",),
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def writes(metrics: httpx.Response, outcome: str) -> float:
    """Return the memory-writes counter of one outcome from a /metrics page."""
    prefix = f'chatbot_memory_writes_total{{outcome="{outcome}"}}'
    return sum(float(line.split()[-1]) for line in metrics.text.splitlines() if line.startswith(prefix))


async def test_memory_work_in_flight_on_another_replica_never_lands_after_a_reset(isolated_database_url: str) -> None:
    extracting, reset_done = asyncio.Event(), asyncio.Event()

    async def slow(job: MemoryJob) -> MemoryCandidates:
        extracting.set()
        await reset_done.wait()  # in flight until the reset on B has answered
        return await offline_extractor(job)

    # Two replicas on one database: A extracts slowly, B serves the reset.
    async with (
        running_app(isolated_database_url, memory_extractor=slow) as replica_a,
        running_app(isolated_database_url) as replica_b,
    ):
        dropped_before = writes(await replica_a.get("/metrics"), "dropped_gone")
        await say(replica_a, "reset-a1", "remember that I live in Yazd", **EN)
        # A second job of the same user waits in A's queue behind the first.
        await say(replica_a, "reset-a2", "remember that I prefer email", **EN)
        await asyncio.wait_for(extracting.wait(), 5)
        reset = await replica_b.delete("/v1/users/u1/memory", headers={"Authorization": _bearer()})
        assert reset.status_code == 204
        reset_done.set()
        await services_of(replica_a).memory.drain(15)
        assert await memory_of(replica_b, **EN) == {"user_id": "u1", "profile": {}, "facts": []}
        assert store_rows(isolated_database_url, "u1") == []
        assert writes(await replica_a.get("/metrics"), "dropped_gone") - dropped_before == 2
        # A reset is not a ban: memory work asked for afterwards lands, on either replica.
        await say(replica_a, "reset-a3", "remember that I live in Kerman", **EN)
        await wait_for_fact(replica_b, "Kerman", within=10.0, **EN)


def _bearer() -> str:
    from tests.fixtures.tokens import make_token

    return f"Bearer {make_token('acme', 'u1')}"


async def test_writes_and_reads_refresh_the_memory_ttl(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url, memory_ttl_days=1.0) as client:
        await say(client, "ttl-1", "remember that I live in Yazd", **EN)
        await wait_for_fact(client, "Yazd", **EN)
        written = store_rows(url, "u1")
        assert written and all(expires is not None for *_, expires in written)
        with psycopg.connect(url) as conn:  # the whole TTL, in minutes, on every item
            assert {r[0] for r in conn.execute("select ttl_minutes from store").fetchall()} == {24 * 60.0}
        # Each refresh is a later transaction than the write it follows, a request apart at least.
        await say(client, "ttl-2", "How do I renew third-party insurance?", **EN)  # load_memory reads
        after_run = store_rows(url, "u1")
        assert all(new[2] > old[2] for old, new in zip(written, after_run, strict=True))  # type: ignore[operator]
        await memory_of(client, **EN)  # the memory endpoint reads too
        after_read = store_rows(url, "u1")
        assert all(new[2] > old[2] for old, new in zip(after_run, after_read, strict=True))  # type: ignore[operator]


async def test_memory_without_a_ttl_never_expires(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        await say(client, "no-ttl", "remember that I live in Yazd", **EN)
        await wait_for_fact(client, "Yazd", **EN)
    rows = store_rows(isolated_database_url, "u1")
    assert rows and all(expires is None for *_, expires in rows)


async def test_memory_nobody_uses_is_removed_after_its_ttl(isolated_database_url: str) -> None:
    url = isolated_database_url
    ttl_seconds = 3.0
    settings: dict[str, Any] = {"memory_ttl_days": ttl_seconds / SECONDS_PER_DAY, "memory_ttl_sweep_minutes": 0.01}
    async with running_app(url, **settings) as client:
        await say(client, "expire", "remember that I live in Yazd", **EN)
        await wait_for_fact(client, "Yazd", **EN)
        assert store_rows(url, "u1")
        # Nobody reads or writes it now; the store's sweeper deletes the rows themselves.
        await wait_until(lambda: not store_rows(url, "u1"), what="the sweeper deleting the rows", timeout=60)
        assert store_rows(url, "u1") == []
        assert await memory_of(client, **EN) == {"user_id": "u1", "profile": {}, "facts": []}
        # Memory written afterwards is remembered again.
        await say(client, "expire", "remember that I prefer email", **EN)
        await wait_for_fact(client, "email", **EN)
