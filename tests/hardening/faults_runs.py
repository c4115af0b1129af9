"""Sending runs as a client that keeps what it saw, and the probes a fault test runs afterwards."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import psycopg

from chatbot.db.locks import THREAD_LOCKED
from tests.fixtures.sse import events_of
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until
from tests.hardening.faults_ledger import ANSWERED, Attempt, Ledger

# The contract: a killed replica's thread lock is free within a second.
LOCK_FREE_SECONDS = 1.0
JSON = {"Accept": "application/json"}


def _run_id_of(location: str | None) -> str | None:
    # `Location: /v1/threads/{thread}/runs/{run_id}/stream`
    return location.split("/")[-2] if location else None


async def stream_run(
    client: httpx.AsyncClient, attempt: Attempt, on_event: Callable[[Attempt], None] | None = None
) -> Attempt:
    """Send the attempt's message as an SSE run, recording each event as it arrives.

    A connection cut by a fault ends the attempt where it was: what the client saw by
    then is what it was acknowledged.
    """
    body = {"message": {"content": attempt.content}}
    try:
        async with client.stream(
            "POST", f"/v1/threads/{attempt.thread}/runs", json=body, headers=auth(user=attempt.user)
        ) as response:
            attempt.status_code = response.status_code
            if response.status_code != 200:
                await response.aread()
                attempt.data = response.json()
                return attempt
            async for event in events_of(response):
                if event.event == "metadata":
                    attempt.run_id = event.data["run_id"]
                elif event.event == "token":
                    attempt.tokens += event.data["content"]
                elif event.event in ("end", "error"):
                    attempt.terminal, attempt.data = event.event, event.data
                if on_event is not None:
                    on_event(attempt)
    except httpx.HTTPError:
        pass  # the replica died under it
    return attempt


async def json_run(client: httpx.AsyncClient, attempt: Attempt) -> Attempt:
    """Send the attempt's message as a JSON run (a failed run names itself in `Location`)."""
    body = {"message": {"content": attempt.content}}
    try:
        response = await client.post(
            f"/v1/threads/{attempt.thread}/runs", json=body, headers={**JSON, **auth(user=attempt.user)}
        )
    except httpx.HTTPError:
        return attempt
    attempt.status_code = response.status_code
    attempt.data = response.json()
    attempt.run_id = _run_id_of(response.headers.get("location"))
    if attempt.run_id is not None:
        attempt.terminal = "end" if response.status_code == 200 else "error"
        if response.status_code == 200:
            attempt.tokens = attempt.data["message"]["content"]
    return attempt


async def next_run_answers(client: httpx.AsyncClient, ledger: Ledger, thread: str, user: str, content: str) -> None:
    """Assert that a run on the thread is accepted and answers."""
    attempt = await json_run(client, ledger.new(thread, user, content))
    assert attempt.status_code == 200, (thread, attempt.status_code, attempt.data)
    assert attempt.data["status"] in ANSWERED, attempt.data


async def thread_locked(database_url: str, thread: str) -> bool:
    """Return True while any session holds the thread's run lock."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        row = await (await conn.execute(THREAD_LOCKED, {"thread": thread})).fetchone()
    assert row is not None
    return bool(row[0])


async def seconds_until_unlocked(database_url: str, threads: list[str], limit: float = 30.0) -> float:
    """Wait until no thread of `threads` is locked; return how long it took."""
    started = time.monotonic()

    async def unlocked() -> bool:
        return not [t for t in threads if await thread_locked(database_url, t)]

    await wait_until(unlocked, what=f"the locks of {threads} to be free", timeout=limit)
    return time.monotonic() - started
