"""Postgres stopped and restarted while runs stream: they fail cleanly, and the threads come back whole.

Two outages on one replica. The first stops Postgres mid-answer and keeps it down until
the runs have failed: the stream ends with an `error` event `503`, the JSON call answers
`503` problem details. The second stops and restarts Postgres while a run is still
streaming: the run ends (answered, or `503`), never hangs. After each, once the replica
is ready again, every acknowledged message is in its thread once, no answer is
half-written, no lock is left behind, and the next run answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.app import Replica, start_replica
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.stoppable_postgres import StoppablePostgres
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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError("the replica did not become ready after Postgres came back")


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
