"""The production shape, on real `chatbot serve` processes: hundreds of slow streams on a fixed
connection budget, rejoins from either replica, killed replicas and dropped lock sessions."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import psycopg
import pytest

from tests.fixtures.app import Replica
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.postgres import worker_urls
from tests.fixtures.sse import Event, answer_of, events_of, parse_blocks
from tests.fixtures.tokens import auth
from tests.fixtures.wait import forever, wait_until

QUESTION = {"message": {"content": "What does travel insurance cover for medical costs abroad?"}}
EN = {"locale": "en-US"}
POOL_MAX_SIZE = 8

# Thread locks are the exclusive advisory locks; each lock session also holds a shared one
# per user with runs in flight (the erasure key, db/locks.py), not counted here.
# A bigint advisory key shows as objsubid 1 (Citus' own shard and placement locks, also
# advisory, use 4 and above).
_OUR_ADVISORY_LOCKS = (
    "select count(*) as n from pg_locks where locktype = 'advisory' and granted and mode = 'ExclusiveLock' "
    "and objsubid = 1 and database = (select oid from pg_database where datname = current_database())"
)
_NO_ADVISORY_LOCKS = f"select n = 0 from ({_OUR_ADVISORY_LOCKS}) held"
# Client backends only: a Citus database has a maintenance daemon of its own on every node.
_CONNECTIONS = (
    "select count(*) as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
    " and backend_type = 'client backend'"
)
# On a Citus worker: the coordinator backends with a connection here (each connection names its
# backend's global pid; a multi-shard statement may open several, in parallel, for a while).
_FROM_THE_COORDINATOR = (
    "select count(distinct application_name) as n from pg_stat_activity where datname = current_database()"
    " and application_name like 'citus_internal gpid=%'"
)


@pytest.fixture(scope="module", autouse=True)
def _knowledge(migrated_database_url: str) -> None:
    asyncio.run(load_demo_kb(migrated_database_url))


async def _scalar(url: str, sql: str, params: Any = None) -> Any:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(sql, params)).fetchone()
    assert row is not None
    return row[0]


async def _transcript(base_url: str, thread: str, **token: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        response = await client.get(
            f"/v1/threads/{thread}/messages", params={"limit": 100}, headers=auth(**{**EN, **token})
        )
    return response.json()["messages"] if response.status_code == 200 else []


async def _read_until_tokens(events: httpx.Response | AsyncIterator[Event], count: int) -> list[Event]:
    """Read a stream's events until `count` tokens have arrived (the rest stays unread)."""
    source = events_of(events) if isinstance(events, httpx.Response) else events
    seen: list[Event] = []
    while sum(1 for e in seen if e.event == "token") < count:
        seen.append(await anext(source))
    return seen


@pytest.mark.parametrize("rejoin_on", ["same", "other"])
async def test_a_dropped_stream_rejoins_mid_run_on_either_replica(
    replicas: Callable[..., Replica], rejoin_on: str
) -> None:
    executing = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="60", CHATBOT_SSE_KEEPALIVE_SECONDS="0.1")
    other = replicas(CHATBOT_SSE_KEEPALIVE_SECONDS="0.1") if rejoin_on == "other" else executing
    thread = f"rejoin-{rejoin_on}"
    async with httpx.AsyncClient(base_url=executing.base_url, timeout=30) as client:
        async with client.stream("POST", f"/v1/threads/{thread}/runs", json=QUESTION, headers=auth(**EN)) as first:
            location = first.headers["location"]
            before = await _read_until_tokens(first, 3)  # then the connection drops
    run_id = before[0].data["run_id"]
    assert location == f"/v1/threads/{thread}/runs/{run_id}/stream"
    headers = {**auth(**EN), "Last-Event-ID": before[-1].id or ""}
    async with httpx.AsyncClient(base_url=other.base_url, timeout=30) as client:
        response = await client.get(location, headers=headers)
    assert response.status_code == 200
    after, comments = parse_blocks(response.text)
    assert after[0].event == "metadata" and after[0].offset == before[-1].offset
    assert after[-1].event == "end"
    answer = after[-1].data["message"]["content"]
    assert answer_of(before) + answer_of(after) == answer
    assert after[-1].offset == len(answer)
    if rejoin_on == "same":
        assert sum(1 for e in after if e.event == "token") > 1  # live tokens, as they were generated
    else:
        assert comments >= 1  # followed while in flight elsewhere, kept alive meanwhile
    transcript = await _transcript(other.base_url, thread)
    assert [m["content"] for m in transcript if m["role"] == "assistant"] == [answer]


async def test_five_hundred_slow_runs_in_flight_on_one_replica_within_the_connection_budget(
    replicas: Callable[..., Replica], migrated_database_url: str, pg_server_url: str
) -> None:
    # Retrieval is bounded like a model's first token: 500 runs queueing for a few connections
    # on a machine shared with other test workers may take longer than the 20 s default.
    replica = replicas(
        CHATBOT_OFFLINE_TOKEN_DELAY_MS="150",
        CHATBOT_POOL_MAX_SIZE=str(POOL_MAX_SIZE),
        CHATBOT_MODEL_FIRST_TOKEN_TIMEOUT_SECONDS="120",
    )
    # On Citus (make test-citus) the workers too: the coordinator backends that reach a worker are
    # the replica's pool and lock sessions and Citus' maintenance daemon (docs/scaling.md).
    workers = worker_urls(pg_server_url, migrated_database_url)
    peak = {"connections": 0, "locks": 0, "worker": 0}
    done = asyncio.Event()

    async def watch() -> None:
        urls = [migrated_database_url, *workers]
        conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for url in urls]
        try:
            while not done.is_set():  # not polling: samples the peak while the runs go
                for key, sql in (("connections", _CONNECTIONS), ("locks", _OUR_ADVISORY_LOCKS)):
                    row = await (await conns[0].execute(sql)).fetchone()
                    peak[key] = max(peak[key], row[0] if row else 0)
                for conn in conns[1:]:
                    row = await (await conn.execute(_FROM_THE_COORDINATOR)).fetchone()
                    peak["worker"] = max(peak["worker"], row[0] if row else 0)
                await asyncio.sleep(0.05)  # not polling: the sampler's period
        finally:
            for conn in conns:
                await conn.close()

    limits = httpx.Limits(max_connections=600, max_keepalive_connections=600)
    async with httpx.AsyncClient(base_url=replica.base_url, timeout=120, limits=limits) as client:

        async def one(i: int) -> tuple[int, str]:
            response = await client.post(
                f"/v1/threads/burst-{i}/runs", json=QUESTION, headers=auth(user=f"u{i % 50}", **EN)
            )
            return response.status_code, response.text

        watcher = asyncio.create_task(watch())
        results = await asyncio.gather(*(one(i) for i in range(500)))
        done.set()
        await watcher
    assert [code for code, _ in results] == [200] * 500
    last = [parse_blocks(text)[0][-1] for _, text in results]
    failed = Counter(str(e.data.get("reason")) for e in last if e.event != "end")
    assert not failed, failed
    assert peak["locks"] >= 400, peak  # they were in flight together, each holding its thread lock
    # The pool, the lock sessions, the cancel listener and, at most, the pool's outage probe.
    assert peak["connections"] <= POOL_MAX_SIZE + 4, peak
    # The pool's and the lock sessions' backends, and up to 3 of the coordinator's maintenance
    # daemon (deadlock detection, two-phase commit recovery); the listener and the probe never
    # reach a worker.
    assert peak["worker"] <= (POOL_MAX_SIZE + 2 + 3 if workers else 0), peak


async def test_killing_a_replica_with_a_hundred_runs_in_flight_frees_every_thread_with_its_sessions(
    replicas: Callable[..., Replica], migrated_database_url: str
) -> None:
    doomed = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="200")
    survivor = replicas()
    threads = [f"killed-{i}" for i in range(100)]
    limits = httpx.Limits(max_connections=200)
    async with httpx.AsyncClient(base_url=doomed.base_url, timeout=60, limits=limits) as client:
        started = asyncio.Event()
        reached = 0

        async def stream(thread: str) -> None:
            nonlocal reached
            async with client.stream("POST", f"/v1/threads/{thread}/runs", json=QUESTION, headers=auth(**EN)) as r:
                await _read_until_tokens(r, 1)
                reached += 1
                if reached == len(threads):
                    started.set()
                await forever()  # hold the stream open until the replica dies

        tasks = [asyncio.create_task(stream(t)) for t in threads]
        await asyncio.wait_for(started.wait(), 60)
        assert await _scalar(migrated_database_url, _OUR_ADVISORY_LOCKS) == 100
        doomed.kill()
        # Session locks: Postgres ends the killed replica's sessions when their connections close,
        # and the locks go with them, not after a keepalive or a lease.
        await wait_until(
            lambda: _scalar(migrated_database_url, _NO_ADVISORY_LOCKS), what="the killed replica's locks to go"
        )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    async with httpx.AsyncClient(base_url=survivor.base_url, timeout=60) as client:
        codes = [
            (await client.post(f"/v1/threads/{t}/runs", json=QUESTION, headers=auth(**EN))).status_code for t in threads
        ]
    assert codes == [200] * 100
    roles = [m["role"] for m in await _transcript(survivor.base_url, threads[0])]
    assert roles == ["user", "user", "assistant"]  # the killed run's message is kept, its answer never came


async def test_a_run_whose_lock_session_drops_never_writes_after_another_run_took_the_thread(
    replicas: Callable[..., Replica], migrated_database_url: str
) -> None:
    slow = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="120")
    fast = replicas()
    async with httpx.AsyncClient(base_url=slow.base_url, timeout=60) as client:
        async with client.stream("POST", "/v1/threads/fenced/runs", json=QUESTION, headers=auth(**EN)) as first:
            events = events_of(first)
            seen = await _read_until_tokens(events, 1)
            killed = await _scalar(
                migrated_database_url,
                "select count(pg_terminate_backend(pid)) from pg_stat_activity "
                "where datname = current_database() and application_name like %s",
                (f"chatbot-locks-%-{slow.process.pid}",),
            )
            assert killed >= 1
            async with httpx.AsyncClient(base_url=fast.base_url, timeout=60) as other:
                second = await other.post("/v1/threads/fenced/runs", json=QUESTION, headers=auth(**EN))
            assert second.status_code == 200, second.text  # the lock went with the session
            assert parse_blocks(second.text)[0][-1].event == "end"
            rest = [e async for e in events]
    first_run = seen[0].data["run_id"]
    assert rest[-1].event == "error" and rest[-1].data["status"] == 503  # fenced: failed cleanly
    transcript = await _transcript(fast.base_url, "fenced")
    assert [(m["role"], m["run_id"]) for m in transcript] == [
        ("user", first_run),
        ("user", second.headers["location"].split("/")[-2]),
        ("assistant", second.headers["location"].split("/")[-2]),
    ]
    writes_after = await _scalar(
        migrated_database_url,
        "select count(*) from checkpoints where thread_id = 'fenced' and metadata ->> 'run_id' = %s "
        "and metadata ->> 'source' = 'loop'",
        (first_run,),
    )
    assert writes_after == 0
    async with httpx.AsyncClient(base_url=slow.base_url, timeout=60) as client:
        again = await client.post("/v1/threads/fenced/runs", json=QUESTION, headers=auth(**EN))
    assert again.status_code == 200 and parse_blocks(again.text)[0][-1].event == "end"


async def test_past_the_in_flight_cap_a_replica_answers_503_at_once_and_writes_nothing(
    replicas: Callable[..., Replica], migrated_database_url: str
) -> None:
    replica = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="100", CHATBOT_MAX_RUNS_IN_FLIGHT="3")
    async with httpx.AsyncClient(base_url=replica.base_url, timeout=60) as client:
        held = []
        for i in range(3):
            response = await client.send(
                client.build_request("POST", f"/v1/threads/capped-{i}/runs", json=QUESTION, headers=auth(**EN)),
                stream=True,
            )
            held.append(response)
            await _read_until_tokens(response, 1)
        refused = await client.post("/v1/threads/capped-extra/runs", json=QUESTION, headers=auth(**EN))
        for response in held:
            await response.aclose()  # the runs go on to their end without their clients
        assert refused.status_code == 503
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert int(refused.headers["retry-after"]) >= 1
        rows = await _scalar(migrated_database_url, "select count(*) from checkpoints where thread_id = 'capped-extra'")
        assert rows == 0
        codes = []

        async def accepted() -> bool:  # once the runs in flight have ended
            response = await client.post("/v1/threads/capped-extra/runs", json=QUESTION, headers=auth(**EN))
            codes.append(response.status_code)
            return response.status_code != 503

        await wait_until(accepted, what="a run accepted once the capped runs ended", interval=0.2)
    assert codes[-1] == 200 and set(codes[:-1]) <= {503}
