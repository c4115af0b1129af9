"""The isolation matrix: two tenants x two users x every endpoint, under concurrent first runs on two replicas.

Two `chatbot serve` replicas share one Postgres; the offline model streams slowly, so runs
overlap. Four callers (tenants `iso-a`, `iso-b`, users `u1`, `u2` in each) then:

1. race: all four send the first run on the same fresh thread ids at once, spread over both
   replicas. Exactly one gets `200` and owns the thread; the others get `404` or `409`, and
   every checkpoint of the thread carries the owner.
2. intrude: for every thread and every caller that does not own it, every endpoint, first
   while the owner's second run is in flight, then after: runs, rejoin, run record,
   messages, deletion, feedback (`404`; deletion `204` doing nothing), and the owner's
   memory and erasure (`403`). The owner then finds its transcript, feedback and memory as
   they were, and its thread still there.
3. busy from outside: each owner sends runs one after another while every other caller keeps
   sending runs on its thread. Theirs are all refused (`404`) without taking the thread's
   lock, so the owner's runs, with nothing of its own in flight, never meet a `409`.
4. erase namesakes: tenant B's `u1` and `u2` erase themselves; tenant A's `u1` and `u2`
   keep everything.

In-process checks beside the matrix: another caller's refused run never holds the owner's
thread lock, even while it waits on Postgres, and a `DELETE` of another caller's thread runs
exactly the statements of a `DELETE` of a thread that does not exist.

Before the race, tenant A alone gets a distinctive document: B's runs on its words never
cite or retrieve it. At the end no response body any caller received holds another
caller's message text, fact, feedback comment, run id or message id.

`CHATBOT_ISOLATION_ROUNDS` (default 1) repeats steps 1-2 on fresh threads and
`CHATBOT_ISOLATION_THREADS` (default 10) sets the thread ids raced per round (`make isolation`).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.fixtures.app import Replica, running_app, services_of
from tests.fixtures.sse import events_of
from tests.fixtures.wait import wait_until
from tests.hardening.isolation_probes import RIDER_FIGURE, a_only_chunks, ingest_knowledge, probe_and_remember
from tests.hardening.isolation_world import (
    CALLERS,
    JSON,
    TENANT_A,
    TENANT_B,
    USERS,
    Caller,
    Ledger,
    Thread,
    World,
    checkpoint_writers,
    feedback_rows,
    marker,
    memory,
    message,
    nonsense,
    transcript,
)

ROUNDS = int(os.environ.get("CHATBOT_ISOLATION_ROUNDS", "1"))
THREADS = int(os.environ.get("CHATBOT_ISOLATION_THREADS", "10"))
# A clarifying answer is ~40 tokens: about 1.5 s per run at 40 ms, so the race and the
# intrusions meet runs in flight.
TOKEN_DELAY_MS = os.environ.get("CHATBOT_ISOLATION_TOKEN_DELAY_MS", "40")
# Half of the first runs are sent at once (they meet at the thread lock: 409); the others up
# to this long later, some while the winner streams (404 or 409), some after it ended (they
# get the lock and must be refused by the owner check made under it: 404).
LATE_SECONDS = 2.5
SEED = int(os.environ.get("CHATBOT_ISOLATION_SEED", str(random.SystemRandom().randrange(1 << 31))))


async def test_callers_never_reach_each_other(
    replicas: Callable[..., Replica], migrated_database_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    await ingest_knowledge(migrated_database_url, tmp_path)
    pair = await asyncio.gather(
        *(asyncio.to_thread(replicas, CHATBOT_OFFLINE_TOKEN_DELAY_MS=TOKEN_DELAY_MS) for _ in range(2))
    )
    # Idle connections are dropped before the replica's keep-alive (5 s) closes them: a request
    # sent on a connection the server is just closing fails with ReadError, as behind a balancer.
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=100, keepalive_expiry=2)
    async with (
        httpx.AsyncClient(base_url=pair[0].base_url, timeout=60, limits=limits) as one,
        httpx.AsyncClient(base_url=pair[1].base_url, timeout=60, limits=limits) as two,
        await psycopg.AsyncConnection.connect(migrated_database_url, autocommit=True) as conn,
    ):
        world = World(Ledger(), (one, two), conn, rng=random.Random(SEED))
        world.a_only_chunks = await a_only_chunks(conn)
        world.ledger.tenant_secrets[TENANT_A] = {RIDER_FIGURE}
        await asyncio.gather(*(probe_and_remember(world, k, c) for k, c in enumerate(CALLERS)))
        threads: list[Thread] = []
        for round_no in range(ROUNDS):
            raced = await _race_first_runs(world, round_no)
            await _intrude_while_owners_run(world, raced)
            everyone = frozenset(CALLERS)
            await _check_owners(world, raced, "during the owners' runs", expect_structure=True, memory_of=everyone)
            await asyncio.gather(*(_intrude(world, t, c, k) for k, (t, c) in enumerate(_non_owners(raced))))
            await _check_owners(world, raced, "after the intrusions", expect_structure=False, memory_of=everyone)
            await _owners_talk_while_others_are_refused(world, raced)
            await _check_owners(world, raced, "beside refused runs", expect_structure=True, memory_of=everyone)
            threads += raced
        await _erase_tenant_b_namesakes(world, threads)
    ledger = world.ledger
    scanned = ledger.scan_for_leaks()
    print(
        f"\nisolation matrix: {ROUNDS} round(s) x {THREADS} threads, seed {SEED}, "
        f"{time.monotonic() - started:.1f} s\n"
        f"  requests: {ledger.requests} ({', '.join(f'{s}: {n}' for s, n in sorted(ledger.statuses.items()))})\n"
        f"  first runs: {dict(sorted(world.first_run_statuses.items()))}\n"
        f"  owner runs in flight at the start / end of the in-flight pass: {world.in_flight}\n"
        f"  owner runs beside others' refused runs: {world.beside_refusals['owner runs']} "
        f"(refused beside them: {world.beside_refusals['refused']})\n"
        f"  (thread, non-owner) pairs: {len(ledger.pairs)}, intrusions: {ledger.intrusions} "
        f"({ledger.during_runs} answered while the owner's run was in flight), "
        f"owner-side checks: {ledger.owner_checks}\n"
        f"  (body, other caller) pairs scanned for secrets: {scanned}\n"
        f"  leaks found: {len(ledger.failures)}"
    )
    failures = ledger.failures
    assert not failures, "\n".join(failures[:40])


async def _race_first_runs(world: World, round_no: int) -> list[Thread]:
    """Send every caller's first run on every fresh thread id at once; keep the threads won."""
    ledger = world.ledger
    ids = [f"iso-{round_no}-{i}-{uuid.uuid4().hex[:8]}" for i in range(THREADS)]
    sent = {(t, c): nonsense(marker()) for t in ids for c in CALLERS}
    for (_, caller), text in sent.items():
        ledger.own(caller, text.split()[-1])

    async def first_run(i: int, thread: str, k: int, caller: Caller) -> tuple[Caller, httpx.Response]:
        client = world.clients[(i + k) % 2]  # each thread's callers split over both replicas
        if world.rng.random() < 0.5:
            await asyncio.sleep(world.rng.uniform(0, LATE_SECONDS))  # not polling: a seeded late start
        body = message(sent[thread, caller])
        response = await client.post(f"/v1/threads/{thread}/runs", json=body, headers=caller.headers(**JSON))
        return caller, ledger.seen(caller, "first run", response)

    results = await asyncio.gather(*(first_run(i, t, k, c) for i, t in enumerate(ids) for k, c in enumerate(CALLERS)))
    threads = []
    for i, thread in enumerate(ids):
        outcomes = results[i * len(CALLERS) : (i + 1) * len(CALLERS)]
        world.first_run_statuses.update(r.status_code for _, r in outcomes)
        winners = [(c, r) for c, r in outcomes if r.status_code == 200]
        losers = [(c, r.status_code) for c, r in outcomes if r.status_code != 200]
        if len(winners) != 1 or any(code not in (404, 409) for _, code in losers):
            ledger.fail(f"{thread}: first runs answered {[(str(c), r.status_code) for c, r in outcomes]}")
            continue
        owner, response = winners[0]
        end = response.json()
        ledger.own(owner, end["run_id"], end["message"]["id"])
        threads.append(Thread(thread, owner, world.clients[i % 2], [sent[thread, owner]], [end["run_id"]]))
    return threads


def _non_owners(threads: list[Thread]) -> list[tuple[Thread, Caller]]:
    return [(t, c) for t in threads for c in CALLERS if c != t.owner]


async def _intrude_while_owners_run(world: World, threads: list[Thread]) -> None:
    """Rate each first run, start each owner's second run, and intrude while they stream."""
    ledger = world.ledger
    for t in threads:
        comment = f"owner feedback {marker()}"
        ledger.own(t.owner, comment)
        rating = {"score": "up", "comment": comment}
        response = await t.client.post(
            f"/v1/threads/{t.id}/runs/{t.runs[0]}/feedback", json=rating, headers=t.owner.headers()
        )
        if ledger.expect(t.owner, "owner feedback", response, 204):
            t.feedback = [(t.runs[0], t.owner.tenant, t.owner.user, "up", comment)]
    started = {t.id: asyncio.Event() for t in threads}

    async def second_run(t: Thread) -> None:
        text = nonsense(marker())
        ledger.own(t.owner, text.split()[-1])
        last = None
        try:
            async with t.client.stream(
                "POST", f"/v1/threads/{t.id}/runs", json=message(text), headers=t.owner.headers()
            ) as response:
                ledger.requests += 1
                ledger.statuses[response.status_code] += 1
                if response.status_code != 200:
                    ledger.fail(f"{t.owner} second run on its own thread: {response.status_code}")
                    return
                async for event in events_of(response):
                    if event.event == "metadata":
                        t.sent.append(text)
                        t.runs.append(event.data["run_id"])
                        ledger.own(t.owner, event.data["run_id"])
                        started[t.id].set()
                    last = event
        finally:
            started[t.id].set()
        if last is None or last.event != "end":
            ledger.fail(f"{t.owner} second run on its own thread ended with {last}")

    runs = {t.id: asyncio.create_task(second_run(t)) for t in threads}
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 30)
    at_start = sum(not r.done() for r in runs.values())
    await asyncio.gather(
        *(
            _intrude(world, t, c, k, runs=t.runs[-1:], users=False, running=runs[t.id])
            for k, (t, c) in enumerate(_non_owners(threads))
        )
    )
    world.in_flight.append((at_start, sum(not r.done() for r in runs.values())))
    await asyncio.gather(*runs.values())


OWNER_RUNS_BESIDE_REFUSALS = 3


async def _owners_talk_while_others_are_refused(world: World, threads: list[Thread]) -> None:
    """Each owner sends runs one after another while the other callers keep sending runs on its thread.

    Every one of theirs is refused (404). A refused run used to take the thread's lock before
    its owner check, so the owner's own runs met `409 a run is already in flight` with nothing
    of theirs in flight (4 times out of 8; docs/measurements/reliability.md).
    """
    ledger = world.ledger
    done = {t.id: asyncio.Event() for t in threads}

    async def owner(t: Thread) -> None:
        try:
            for _ in range(OWNER_RUNS_BESIDE_REFUSALS):
                text = nonsense(marker())
                ledger.own(t.owner, text.split()[-1])
                response = await t.client.post(
                    f"/v1/threads/{t.id}/runs", json=message(text), headers=t.owner.headers(**JSON)
                )
                world.beside_refusals["owner runs"] += 1
                if not ledger.expect(t.owner, f"own run on {t.id} beside refused ones", response, 200):
                    continue
                end = response.json()
                ledger.own(t.owner, end["run_id"], end["message"]["id"])
                t.sent.append(text)
                t.runs.append(end["run_id"])
        finally:
            done[t.id].set()

    async def refused(t: Thread, caller: Caller, k: int) -> None:
        client = world.clients[k % 2]
        while not done[t.id].is_set():
            mark = marker()
            ledger.own(caller, mark)
            response = await client.post(
                f"/v1/threads/{t.id}/runs", json=message(nonsense(mark)), headers=caller.headers(**JSON)
            )
            world.beside_refusals["refused"] += 1
            ledger.expect(caller, f"run on {t.owner}'s {t.id} beside the owner's", response, 404)

    await asyncio.gather(
        *(owner(t) for t in threads), *(refused(t, c, k) for k, (t, c) in enumerate(_non_owners(threads)))
    )


async def _intrude(
    world: World,
    t: Thread,
    caller: Caller,
    k: int,
    *,
    runs: list[str] | None = None,
    users: bool = True,
    running: asyncio.Task[None] | None = None,
) -> None:
    """Try every endpoint on another caller's thread and user; expect 404, 204 (a no-op) or 403.

    With `running` (the owner's run in flight), each pair starts at another endpoint, so that
    every endpoint meets runs live; answers received before the run ended are counted.
    """
    ledger, client = world.ledger, world.clients[k % 2]
    ledger.pairs.add((t.id, str(caller)))
    mark = marker()
    ledger.own(caller, mark)
    path = f"/v1/threads/{t.id}"
    tries: list[tuple[str, str, str, dict[str, Any], int]] = []
    for run in t.runs if runs is None else runs:
        tries += [
            ("GET stream", "GET", f"{path}/runs/{run}/stream", {}, 404),
            (
                "GET stream from offset",
                "GET",
                f"{path}/runs/{run}/stream",
                {"headers": {"Last-Event-ID": f"{run}:3"}},
                404,
            ),
            ("GET run record", "GET", f"{path}/runs/{run}", {}, 404),
            ("POST feedback", "POST", f"{path}/runs/{run}/feedback", {"json": {"score": "down", "comment": mark}}, 404),
        ]
    tries[1:1] = [("POST runs", "POST", f"{path}/runs", {"json": message(nonsense(mark)), "headers": JSON}, 404)]
    tries += [
        ("GET messages", "GET", f"{path}/messages", {"params": {"limit": 100}}, 404),
        ("DELETE thread", "DELETE", path, {}, 204),
    ]
    if users and caller.user != t.owner.user:
        user = f"/v1/users/{t.owner.user}"
        tries += [
            ("GET memory", "GET", f"{user}/memory", {}, 403),
            ("DELETE memory", "DELETE", f"{user}/memory", {}, 403),
            ("DELETE user", "DELETE", user, {}, 403),
        ]
    elif users:
        # The same user id in the other tenant: its own memory, which must not be the owner's
        # (the leak scan looks for the owner's fact in this body).
        tries.append(("GET namesake's memory", "GET", f"/v1/users/{t.owner.user}/memory", {}, 200))
    if running is not None:
        # Pairs start at different endpoints: every endpoint is somebody's first, sent at once.
        tries = tries[k % len(tries) :] + tries[: k % len(tries)]
    for label, method, url, kwargs, expected in tries:
        headers = caller.headers(**kwargs.pop("headers", {}))
        response = await client.request(method, url, headers=headers, **kwargs)
        ledger.intrusions += 1
        if running is not None and not running.done():
            ledger.during_runs += 1
        ledger.expect(caller, f"{label} on {t.owner}'s {t.id}", response, expected)


async def _check_owners(
    world: World,
    threads: list[Thread],
    when: str,
    *,
    expect_structure: bool,
    memory_of: frozenset[Caller] = frozenset(),
) -> None:
    """Check from each owner's side that the thread, its feedback and everyone's memory are as they were."""
    ledger = world.ledger
    for t in threads:
        messages = await transcript(t.client, t.owner, t.id)
        ledger.owner_checks += 1
        if messages is None:
            ledger.fail(f"{t.owner}'s {t.id} is gone {when}")
            continue
        for m in messages:
            ledger.own(t.owner, m["id"])
        if expect_structure:
            shape = [(m["role"], m["run_id"], m["content"] if m["role"] == "user" else None) for m in messages]
            wanted = [
                (role, run, text if role == "user" else None)
                for run, text in zip(t.runs, t.sent, strict=True)
                for role in ("user", "assistant")
            ]
            if shape != wanted:
                ledger.fail(f"{t.owner}'s {t.id} {when}: transcript {shape}, expected {wanted}")
            t.snapshot = messages
        elif messages != t.snapshot:
            ledger.fail(f"{t.owner}'s {t.id} {when}: transcript changed")
        writers = await checkpoint_writers(world.conn, t.id)
        if writers != {(t.owner.tenant, t.owner.user)}:
            ledger.fail(f"{t.owner}'s {t.id} {when}: checkpoints written by {sorted(writers)}")
        if await feedback_rows(world.conn, t.id) != t.feedback:
            ledger.fail(f"{t.owner}'s {t.id} {when}: feedback changed")
        for label, url in (
            ("record", f"/v1/threads/{t.id}/runs/{t.runs[0]}"),
            ("rejoin", f"/v1/threads/{t.id}/runs/{t.runs[0]}/stream"),
        ):
            response = await t.client.get(url, headers=t.owner.headers())
            ledger.expect(t.owner, f"owner's own {label} {when}", response, 200)
    await _check_memories(world, sorted({t.owner for t in threads} | memory_of, key=str), when)


async def _check_memories(world: World, callers: list[Caller], when: str) -> None:
    for caller in callers:
        world.ledger.owner_checks += 1
        if await memory(world.clients[0], caller) != world.memories[caller]:
            world.ledger.fail(f"{caller}'s memory changed {when}")


async def _erase_tenant_b_namesakes(world: World, threads: list[Thread]) -> None:
    """Erase B's u1 and u2 (the same user ids as A's): A's users keep every thread and fact."""
    ledger, client = world.ledger, world.clients[1]
    for user in USERS:
        namesake = Caller(TENANT_B, user)
        own_memory = await client.get(f"/v1/users/{user}/memory", headers=namesake.headers())
        if ledger.expect(namesake, "own memory", own_memory, 200):
            if own_memory.json() != world.memories[namesake]:
                ledger.fail(f"{namesake} reads a memory that is not its own")
        ledger.expect(
            namesake,
            "forget own memory",
            await client.delete(f"/v1/users/{user}/memory", headers=namesake.headers()),
            204,
        )
        erased = await client.delete(f"/v1/users/{user}", headers=namesake.headers())
        if ledger.expect(namesake, "erase self", erased, 200):
            owned = 1 + sum(t.owner == namesake for t in threads)  # the probe thread too
            if erased.json()["threads_deleted"] != owned:
                ledger.fail(f"{namesake} erasure deleted {erased.json()['threads_deleted']} threads, owned {owned}")
        if (await memory(client, namesake))["facts"]:
            ledger.fail(f"{namesake}'s facts survived its erasure")
    for t in threads:
        if t.owner.tenant == TENANT_B and await transcript(t.client, t.owner, t.id) is not None:
            ledger.fail(f"{t.owner}'s {t.id} survived its owner's erasure")
    a_threads = [t for t in threads if t.owner.tenant == TENANT_A]
    tenant_a = frozenset(c for c in CALLERS if c.tenant == TENANT_A)
    await _check_owners(
        world, a_threads, "after tenant B's namesakes were erased", expect_structure=False, memory_of=tenant_a
    )
    for caller in CALLERS:
        if caller.tenant == TENANT_A and await transcript(client, caller, world.probe_threads[caller]) is None:
            ledger.fail(f"{caller}'s probe thread vanished with tenant B's erasure")


# --- In-process: a refused caller never holds the owner's lock, and DELETE tells nothing apart ---

# The owner check: the first statement of a run's take-thread call (db/locks.py, migration 0013).
_OWNER_READ = "select ok, user_ok, owned, tenant_id, user_id%"


async def _blocked_owner_reads(conn: psycopg.AsyncConnection[Any], count: int) -> None:
    """Wait until `count` owner checks of the app wait on the lock the test holds on `checkpoints`."""

    async def waiting() -> bool:
        cur = await conn.execute(
            "select count(*) from pg_stat_activity where datname = current_database() "
            "and wait_event_type = 'Lock' and query like %s",
            (_OWNER_READ,),
        )
        row = await cur.fetchone()
        return row is not None and row[0] >= count

    await wait_until(waiting, what=f"{count} owner checks waiting on the lock")


async def test_another_callers_refused_run_never_holds_the_owners_thread(migrated_database_url: str) -> None:
    owner, other = Caller("busy-a", "u1"), Caller("busy-b", "u1")
    thread = f"busy-{uuid.uuid4().hex[:8]}"
    runs = f"/v1/threads/{thread}/runs"
    async with running_app(migrated_database_url) as client:
        first = await client.post(runs, json=message("first"), headers=owner.headers(**JSON))
        assert first.status_code == 200
        async with (
            await psycopg.AsyncConnection.connect(migrated_database_url, autocommit=True) as watcher,
            await psycopg.AsyncConnection.connect(migrated_database_url) as blocker,
        ):
            # Every owner check now waits on Postgres, as under load or a slow disk: the
            # other caller's run is caught mid-check, and the owner's run comes meanwhile.
            await blocker.execute("lock table checkpoints in access exclusive mode")
            refused = asyncio.create_task(client.post(runs, json=message("intruding"), headers=other.headers(**JSON)))
            await _blocked_owner_reads(watcher, 1)
            owned = asyncio.create_task(client.post(runs, json=message("second"), headers=owner.headers(**JSON)))
            # The owner's run waits in the replica for the intruder's attempt to be decided.
            await wait_until(lambda: services_of(client).runs.in_flight >= 2, what="the owner's run starting")
            await blocker.rollback()
            # Before the fix the refused run held the thread's lock while it waited: the owner got 409.
            assert (await refused).status_code == 404
            assert (await owned).status_code == 200, (await owned).text
            fences = await watcher.execute("select count(*) from thread_fences where thread_id = %s", (thread,))
            assert await fences.fetchone() == (1,)


_recording: ContextVar[list[str] | None] = ContextVar("statements", default=None)


@pytest.fixture
def record_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Record the text of every statement the app runs in a request made under `_statements_of`."""
    original = psycopg.AsyncCursor.execute

    async def execute(self: psycopg.AsyncCursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        seen = _recording.get()
        if seen is not None:
            seen.append(query if isinstance(query, str) else repr(query))
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)


async def _statements_of(request: Awaitable[httpx.Response], status: int) -> list[str]:
    seen: list[str] = []
    token = _recording.set(seen)  # tasks the request starts inherit it; the app's background loops do not
    try:
        response = await request
    finally:
        _recording.reset(token)
    assert response.status_code == status, response.text
    return seen


async def test_delete_of_another_callers_thread_runs_what_a_missing_thread_runs(
    migrated_database_url: str, record_statements: None
) -> None:
    owner, other = Caller("del-a", "u1"), Caller("del-b", "u1")
    thread = f"del-{uuid.uuid4().hex[:8]}"
    async with running_app(migrated_database_url) as client:
        created = await client.post(f"/v1/threads/{thread}/runs", json=message("mine"), headers=owner.headers(**JSON))
        assert created.status_code == 200
        others = await _statements_of(client.delete(f"/v1/threads/{thread}", headers=other.headers()), 204)
        missing = await _statements_of(
            client.delete(f"/v1/threads/del-missing-{uuid.uuid4().hex[:8]}", headers=other.headers()), 204
        )
        # Before the fix a missing thread took the lock, read the owner again and deleted (7.0 ms
        # against 2.9 ms): one DELETE told another caller's thread from a missing one 91% of the time.
        # The same two reads either way: whose checkpoints, and whose recall rows (threads/deletion.py).
        assert others == missing and len(others) == 2, (others, missing)
        own = await _statements_of(client.delete(f"/v1/threads/{thread}", headers=owner.headers()), 204)
        assert len(own) > 1  # the owner's own thread is deleted, under its lock
        assert (await client.get(f"/v1/threads/{thread}/messages", headers=owner.headers())).status_code == 404
