"""Threads belong to the tenant and user whose run created them, under any interleaving."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg

from chatbot.db.locks import Lease, Locks
from chatbot.ids import TenantId, ThreadId, UserId
from tests.fixtures.app import running_app, services_of
from tests.fixtures.sse import parse_blocks
from tests.fixtures.tokens import auth

QUESTION = {"message": {"content": "What does travel insurance cover?"}}


class _HeldAtTheLock:
    """Locks whose thread lock waits for a gate: the caller has passed its access check."""

    def __init__(self, inner: Locks, gate: asyncio.Event, reached: asyncio.Event) -> None:
        self._inner, self._gate, self._reached = inner, gate, reached

    async def try_run(self, thread_id: str, tenant_id: str, user_id: str) -> Lease | None:
        self._reached.set()
        await self._gate.wait()
        return await self._inner.try_run(ThreadId(thread_id), TenantId(tenant_id), UserId(user_id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _owners(url: str, thread: str) -> set[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select distinct metadata ->> 'tenant_id', metadata ->> 'user_id' from checkpoints where thread_id = %s",
            (thread,),
        ).fetchall()
    return {(r[0], r[1]) for r in rows}


async def test_a_first_run_that_reaches_the_lock_after_another_caller_created_the_thread_is_404(
    isolated_database_url: str,
) -> None:
    gate, reached = asyncio.Event(), asyncio.Event()
    async with running_app(isolated_database_url) as late, running_app(isolated_database_url) as early:
        runs = services_of(late).runs
        runs.locks = _HeldAtTheLock(runs.locks, gate, reached)  # type: ignore[assignment]
        intruder = asyncio.create_task(
            late.post("/v1/threads/contested/runs", json=QUESTION, headers=auth("globex", "g1"))
        )
        # globex's first run is on its way to the thread lock (a bound: a hang would be a bug here).
        await asyncio.wait_for(reached.wait(), 30)
        owner = await early.post("/v1/threads/contested/runs", json=QUESTION, headers=auth("acme", "u1"))
        assert owner.status_code == 200 and parse_blocks(owner.text)[0][-1].event == "end"
        gate.set()
        refused = await intruder
        assert refused.status_code == 404
        assert _owners(isolated_database_url, "contested") == {("acme", "u1")}
        page = await early.get("/v1/threads/contested/messages", headers=auth("acme", "u1"))
        assert [m["role"] for m in page.json()["messages"]] == ["user", "assistant"]


async def test_another_user_of_the_tenant_cannot_read_post_into_rate_or_delete_a_thread(
    isolated_database_url: str,
) -> None:
    async with running_app(isolated_database_url) as client:
        first = await client.post("/v1/threads/private/runs", json=QUESTION, headers=auth(user="u1"))
        run_id = parse_blocks(first.text)[0][0].data["run_id"]
        other = auth(user="u2")
        reads: list[httpx.Response] = [
            await client.get("/v1/threads/private/messages", headers=other),
            await client.post("/v1/threads/private/runs", json=QUESTION, headers=other),
            await client.post(f"/v1/threads/private/runs/{run_id}/feedback", json={"score": "down"}, headers=other),
            await client.get(f"/v1/threads/private/runs/{run_id}/stream", headers=other),
        ]
        assert [r.status_code for r in reads] == [404] * 4
        assert (await client.delete("/v1/threads/private", headers=other)).status_code == 204
        page = await client.get("/v1/threads/private/messages", headers=auth(user="u1"))
    assert [m["role"] for m in page.json()["messages"]] == ["user", "assistant"]  # untouched
    assert _owners(isolated_database_url, "private") == {("acme", "u1")}


async def test_erasing_a_user_leaves_the_threads_another_user_of_the_tenant_owns(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        first = await client.post("/v1/threads/kept/runs", json=QUESTION, headers=auth(user="u1"))
        assert first.status_code == 200
        # u2 tries to write into u1's thread (refused), then has its own thread, then is erased.
        intrusion = await client.post("/v1/threads/kept/runs", json=QUESTION, headers=auth(user="u2"))
        own = await client.post("/v1/threads/u2-own/runs", json=QUESTION, headers=auth(user="u2"))
        erased = await client.delete("/v1/users/u2", headers=auth(user="u2"))
        kept = await client.get("/v1/threads/kept/messages", headers=auth(user="u1"))
        gone = await client.get("/v1/threads/u2-own/messages", headers=auth(user="u2"))
    assert (intrusion.status_code, own.status_code, erased.status_code) == (404, 200, 200)
    assert erased.json()["threads_deleted"] == 1
    assert [m["role"] for m in kept.json()["messages"]] == ["user", "assistant"]
    assert gone.status_code == 404
    assert _owners(isolated_database_url, "kept") == {("acme", "u1")}
