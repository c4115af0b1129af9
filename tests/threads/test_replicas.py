"""Runs across real `chatbot serve` processes: one run per thread, kills and disconnects.

These talk to the replicas as the backend does, through the service's own typed client.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import pytest

from chatbot.client import AsyncChatbotClient, ConflictError
from chatbot.responses import RunEnd
from tests.fixtures.app import Replica
from tests.fixtures.client import api_client
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.wait import wait_until

QUESTION = "What does travel insurance cover for medical costs abroad?"


@pytest.fixture(scope="module", autouse=True)
def _knowledge(migrated_database_url: str) -> None:
    asyncio.run(load_demo_kb(migrated_database_url))


async def _roles(base_url: str, thread: str) -> list[str]:
    async with api_client(base_url) as client:
        return [message.role for message in (await client.messages(thread, limit=100)).messages]


async def _run(client: AsyncChatbotClient, thread: str) -> RunEnd | ConflictError:
    try:
        return await client.run(thread, QUESTION)
    except ConflictError as conflict:
        return conflict


async def _break_off_after_first_token(client: AsyncChatbotClient, thread: str) -> None:
    # No automatic rejoin (resumes=0 on the client): leaving the loop closes the connection.
    async for event in client.stream(thread, QUESTION):
        if event.event == "token":
            return
    raise AssertionError("the run ended before its first token")


async def _accepted(client: AsyncChatbotClient, thread: str) -> RunEnd | None:
    """Run on the thread; None while another run holds it (409)."""
    result = await _run(client, thread)
    if isinstance(result, ConflictError):
        return None
    assert isinstance(result, RunEnd), result
    return result


async def test_two_replicas_never_run_one_thread_twice(replicas: Callable[..., Replica]) -> None:
    a, b = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="5"), replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="5")
    async with api_client(a.base_url) as ca, api_client(b.base_url) as cb:
        threads = [f"pair-{i}" for i in range(20)]
        results = await asyncio.gather(*(asyncio.gather(_run(ca, t), _run(cb, t)) for t in threads))
    for thread, pair in zip(threads, results, strict=True):
        ends = [result for result in pair if isinstance(result, RunEnd)]
        conflicts = [result for result in pair if isinstance(result, ConflictError)]
        assert len(ends) == 1 and len(conflicts) == 1, (thread, pair)
        assert conflicts[0].status == 409 and ends[0].status == "answered"
        assert await _roles(a.base_url, thread) == ["user", "assistant"]


async def test_killing_a_replica_mid_stream_frees_the_thread(replicas: Callable[..., Replica]) -> None:
    doomed = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="200")
    survivor = replicas()
    async with api_client(doomed.base_url, resumes=0) as client:
        await _break_off_after_first_token(client, "killed")
        doomed.kill()
    async with api_client(survivor.base_url) as client:
        # The lock is a session lock: it goes when Postgres ends the killed replica's session.
        result = await wait_until(lambda: _accepted(client, "killed"), what="the killed replica's lock to go")
    assert isinstance(result, RunEnd) and result.status == "answered"
    # The killed run's message is kept.
    assert await _roles(survivor.base_url, "killed") == ["user", "user", "assistant"]


async def test_a_client_that_disconnects_leaves_the_thread_usable(replicas: Callable[..., Replica]) -> None:
    replica = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="30")
    async with api_client(replica.base_url, resumes=0) as client:
        await _break_off_after_first_token(client, "gone")
        result = await wait_until(
            lambda: _accepted(client, "gone"), what="the thread to be free after its client left", timeout=15
        )
    assert isinstance(result, RunEnd) and result.status == "answered"
    roles = await _roles(replica.base_url, "gone")
    assert roles in (["user", "assistant", "user", "assistant"], ["user", "user", "assistant"])


async def test_a_replica_shut_down_mid_stream_finishes_the_run_and_frees_the_thread(
    replicas: Callable[..., Replica],
) -> None:
    stopping = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="40")
    survivor = replicas()
    async with api_client(stopping.base_url, resumes=0) as client:
        await _break_off_after_first_token(client, "drained")
        stopping.process.send_signal(signal.SIGTERM)  # graceful: drain, then exit
    await asyncio.to_thread(stopping.process.wait, 30)
    async with api_client(survivor.base_url) as client:
        result = await _run(client, "drained")
    assert isinstance(result, RunEnd) and result.status == "answered"
    assert await _roles(survivor.base_url, "drained") == ["user", "assistant", "user", "assistant"]  # completed
