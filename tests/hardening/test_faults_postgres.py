"""Postgres stopped and restarted while runs stream: they fail cleanly, and the threads come back whole.

Two outages on one replica. The first stops Postgres mid-answer and keeps it down until
the runs have failed: the stream ends with an `error` event `503`, the JSON call answers
`503` problem details. The second stops and restarts Postgres while a run is still
streaming: the run ends (answered, or `503`), never hangs. After each, once the replica
is ready again, every acknowledged message is in its thread once, no answer is
half-written, no lock is left behind, and the next run answers.

A third case restarts Postgres while a replica sits idle (docs/measurements/reliability.md): the first
request after it must be served at once, not answer `503` after walking the pool's dead
connections. `make test` runs one restart; `make faults` (which sets `CHATBOT_FAULT_KILLS`)
runs `CHATBOT_FAULT_RESTARTS` (default 5) with 15 s of idleness each.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chatbot.db.pool import FRESH_SECONDS
from tests.fixtures.app import Replica, start_replica
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.stoppable_postgres import StoppablePostgres
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until
from tests.hardening.faults_ledger import Attempt, Findings, Ledger
from tests.hardening.faults_runs import json_run, next_run_answers, seconds_until_unlocked, stream_run

QUESTION = "What does travel insurance cover for medical costs abroad?"
# A run must still be streaming when Postgres goes: the offline answer takes a few seconds.
TOKEN_DELAY_MS = "40"
# A failed run must say so well before this (the pool waits 2 s for a connection).
FAIL_WITHIN_SECONDS = 30.0


@pytest.fixture
def replica(stoppable_postgres: StoppablePostgres) -> Iterator[Replica]:
    """Return a replica with a knowledge base, on the stoppable server."""
    asyncio.run(load_demo_kb(stoppable_postgres.database_url))
    started = start_replica(
        stoppable_postgres.database_url,
        CHATBOT_OFFLINE_TOKEN_DELAY_MS=TOKEN_DELAY_MS,
        CHATBOT_SSE_KEEPALIVE_SECONDS="0.2",
    )
    yield started
    started.kill()


async def _ready(client: httpx.AsyncClient) -> None:
    async def ready() -> bool:
        try:
            return (await client.get("/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    await wait_until(ready, what="the replica ready after Postgres came back", timeout=60, interval=0.2)


async def _streaming(client: httpx.AsyncClient, attempt: Attempt) -> asyncio.Task[Attempt]:
    """Start an SSE run and return its task once the client has seen a token."""
    first_token = asyncio.Event()
    task = asyncio.create_task(stream_run(client, attempt, lambda a: first_token.set() if a.tokens else None))
    await asyncio.wait_for(first_token.wait(), FAIL_WITHIN_SECONDS)
    return task


async def test_postgres_stopped_mid_run_fails_the_run_cleanly_and_the_threads_recover(
    stoppable_postgres: StoppablePostgres, replica: Replica
) -> None:
    url = stoppable_postgres.database_url
    ledger, findings = Ledger(), Findings()
    threads = ["pg-sse", "pg-json"]
    async with httpx.AsyncClient(base_url=replica.base_url, timeout=60) as client:
        for thread in threads:
            await next_run_answers(client, ledger, thread, "u1", f"hello before, on {thread}")

        # 1. Down mid-answer, until the runs have failed.
        waiting = asyncio.create_task(json_run(client, ledger.new("pg-json", "u1", f"{QUESTION} (json, outage)")))
        streaming = await _streaming(client, ledger.new("pg-sse", "u1", f"{QUESTION} (sse, outage)"))
        stoppable_postgres.stop()
        stopped = time.monotonic()
        sse, js = await asyncio.wait_for(asyncio.gather(streaming, waiting), FAIL_WITHIN_SECONDS)
        failed_after = time.monotonic() - stopped
        assert sse.terminal == "error" and sse.data["status"] == 503, (sse.phase, sse.data)
        assert js.status_code == 503 and js.data["status"] == 503, (js.status_code, js.data)
        stoppable_postgres.start()
        await _ready(client)
        assert await seconds_until_unlocked(url, threads) < 1.0
        for thread in threads:
            await next_run_answers(client, ledger, thread, "u1", f"hello after the outage, on {thread}")
        await ledger.check(client, findings)
        assert not findings.problems, findings.problems

        # 2. Down and up again while the run still streams.
        streaming = await _streaming(client, ledger.new("pg-sse", "u1", f"{QUESTION} (sse, blip)"))
        stoppable_postgres.stop()
        stoppable_postgres.start()
        blip = await asyncio.wait_for(streaming, FAIL_WITHIN_SECONDS)
        assert blip.terminal == "end" or (blip.terminal == "error" and blip.data["status"] == 503), blip.data
        await _ready(client)
        assert await seconds_until_unlocked(url, threads) < 1.0
        await next_run_answers(client, ledger, "pg-sse", "u1", "hello after the blip")
        await ledger.check(client, findings, ["pg-sse"])
    assert not findings.problems, findings.problems
    print(
        f"\nfaults: postgres: outage mid-run: stream `error` {sse.data['status']}, JSON {js.status_code}, "
        f"{failed_after:.1f} s after the stop; blip mid-run: `{blip.terminal}`; "
        f"{findings.acknowledged} acknowledged messages checked over {findings.threads} thread checks, "
        f"{findings.error_runs} failed runs found recorded as error"
    )


# The long suite is the one that sets CHATBOT_FAULT_KILLS (`make faults`).
_LONG = "CHATBOT_FAULT_KILLS" in os.environ
RESTARTS = int(os.environ.get("CHATBOT_FAULT_RESTARTS", "5" if _LONG else "1"))
# Idle past the pool's freshness window, so every pooled connection is checked before use;
# the long suite waits as long as the replica of the reported outage did.
IDLE_SECONDS = 15.0 if _LONG else FRESH_SECONDS + 1.0
# Generous: a replica that reaches the live server answers in a fraction of this; the bug
# answered 503 after 32 s.
ANSWER_WITHIN_SECONDS = 10.0
CONCURRENT = 12


async def _timed(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    response = await client.request(method, path, **kwargs)
    return time.monotonic() - started, response


async def test_postgres_restarted_while_a_replica_is_idle_serves_the_first_request_at_once(
    stoppable_postgres: StoppablePostgres,
) -> None:
    replica = start_replica(stoppable_postgres.database_url)
    json_run: dict[str, Any] = {
        "headers": {**auth(), **{"Accept": "application/json"}},
        "json": {"message": {"content": "hello"}},
    }
    firsts: list[float] = []
    try:
        async with httpx.AsyncClient(base_url=replica.base_url, timeout=60) as client:
            for round_ in range(RESTARTS):  # not polling: rounds of load, each idling through a restart
                threads = [f"pg-idle-{round_}-{i}" for i in range(CONCURRENT)]
                # 24 requests 12 at a time, so the pool holds a dozen connections...
                for _ in range(2):
                    sent = await asyncio.gather(*(client.post(f"/v1/threads/{t}/runs", **json_run) for t in threads))
                    assert [r.status_code for r in sent] == [200] * CONCURRENT
                # ...then idle, and Postgres restarts under them: the next request comes as soon
                # as it is back (the hardest moment: nothing in the replica has noticed yet).
                await asyncio.sleep(IDLE_SECONDS)  # not polling: idle past the freshness window is the scenario
                stoppable_postgres.stop()
                stoppable_postgres.start()

                took, page = await _timed(client, "GET", f"/v1/threads/{threads[0]}/messages", headers=auth())
                firsts.append(took)
                where = f"round {round_ + 1}: the first request after the restart"
                assert page.status_code != 503, f"{where} answered 503 after {took:.1f} s"
                assert page.status_code == 200, (where, page.status_code)
                assert took < ANSWER_WITHIN_SECONDS, f"{where} took {took:.1f} s"
                assert [m["content"] for m in page.json()["messages"] if m["role"] == "user"] == ["hello"] * 2
                # Every later request, of any kind, is served too.
                later: list[tuple[str, str, dict[str, Any]]] = [
                    ("GET", "/readyz", {}),
                    ("GET", f"/v1/threads/{threads[1]}/messages", {"headers": auth()}),
                    ("POST", f"/v1/threads/{threads[2]}/runs", json_run),
                ]
                for method, path, extra in later:
                    took, response = await _timed(client, method, path, **extra)
                    assert response.status_code == 200, (round_ + 1, method, path, response.status_code, took)
                    assert took < ANSWER_WITHIN_SECONDS, (round_ + 1, method, path, took)
    finally:
        replica.kill()
    print(
        f"\nfaults: postgres restarted while idle ({IDLE_SECONDS:.0f} s), {RESTARTS} round(s): "
        f"first request served in {', '.join(f'{t:.2f}' for t in firsts)} s"
    )
