"""Runs across real `chatbot serve` processes: one run per thread, kills and disconnects."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable

import httpx
import pytest

from tests.fixtures.app import Replica
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.tokens import auth

QUESTION = {"message": {"content": "What does travel insurance cover for medical costs abroad?"}}


def headers() -> dict[str, str]:
    """Mint the caller's headers now: a whole suite on a loaded machine outlives a 5-minute token."""
    return auth(locale="en-US")


@pytest.fixture(scope="module", autouse=True)
def _knowledge(migrated_database_url: str) -> None:
    asyncio.run(load_demo_kb(migrated_database_url))


async def _messages(base_url: str, thread: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        response = await client.get(
            f"/v1/threads/{thread}/messages", params={"limit": 100}, headers=auth(locale="en-US")
        )
    return response.json()["messages"] if response.status_code == 200 else []


async def _run(client: httpx.AsyncClient, thread: str) -> tuple[int, str]:
    response = await client.post(f"/v1/threads/{thread}/runs", json=QUESTION, headers=auth(locale="en-US"))
    return response.status_code, response.text


async def test_two_replicas_never_run_one_thread_twice(replicas: Callable[..., Replica]) -> None:
    a, b = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="5"), replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="5")
    async with (
        httpx.AsyncClient(base_url=a.base_url, timeout=30) as ca,
        httpx.AsyncClient(base_url=b.base_url, timeout=30) as cb,
    ):
        threads = [f"pair-{i}" for i in range(20)]
        results = await asyncio.gather(*(asyncio.gather(_run(ca, t), _run(cb, t)) for t in threads))
    for thread, pair in zip(threads, results, strict=True):
        codes = sorted(code for code, _ in pair)
        assert codes == [200, 409], (thread, codes)
        assert "event: end" in next(text for code, text in pair if code == 200)
        roles = [m["role"] for m in await _messages(a.base_url, thread)]
        assert roles == ["user", "assistant"]


async def test_killing_a_replica_mid_stream_frees_the_thread(replicas: Callable[..., Replica]) -> None:
    doomed = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="200")
    survivor = replicas()
    async with httpx.AsyncClient(base_url=doomed.base_url, timeout=30) as client:
        async with client.stream("POST", "/v1/threads/killed/runs", json=QUESTION, headers=headers()) as response:
            assert response.status_code == 200
            seen = b""
            async for chunk in response.aiter_raw():
                seen += chunk
                if b"event: token" in seen:
                    break
            doomed.kill()
    killed_at = time.monotonic()
    async with httpx.AsyncClient(base_url=survivor.base_url, timeout=30) as client:
        while True:
            code, text = await _run(client, "killed")
            if code != 409:
                break
            assert time.monotonic() - killed_at < 1.0, "the lock outlived the killed replica by over a second"
            await asyncio.sleep(0.05)
        assert code == 200 and "event: end" in text
    roles = [m["role"] for m in await _messages(survivor.base_url, "killed")]
    assert roles == ["user", "user", "assistant"]  # the killed run's message is kept


async def test_a_client_that_disconnects_leaves_the_thread_usable(replicas: Callable[..., Replica]) -> None:
    replica = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="30")
    async with httpx.AsyncClient(base_url=replica.base_url, timeout=30) as client:
        async with client.stream("POST", "/v1/threads/gone/runs", json=QUESTION, headers=headers()) as response:
            async for chunk in response.aiter_raw():
                if b"event: token" in chunk:
                    break  # leaving the block closes the connection mid-stream
        deadline = time.monotonic() + 15
        while True:
            code, text = await _run(client, "gone")
            if code == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert code == 200 and "event: end" in text
    roles = [m["role"] for m in await _messages(replica.base_url, "gone")]
    assert roles in (["user", "assistant", "user", "assistant"], ["user", "user", "assistant"])


async def test_a_replica_shut_down_mid_stream_finishes_the_run_and_frees_the_thread(
    replicas: Callable[..., Replica],
) -> None:
    stopping = replicas(CHATBOT_OFFLINE_TOKEN_DELAY_MS="40")
    survivor = replicas()
    async with httpx.AsyncClient(base_url=stopping.base_url, timeout=30) as client:
        async with client.stream("POST", "/v1/threads/drained/runs", json=QUESTION, headers=headers()) as response:
            seen = b""
            async for chunk in response.aiter_raw():
                seen += chunk
                if b"event: token" in seen:
                    stopping.process.send_signal(signal.SIGTERM)  # graceful: drain, then exit
                    break
    await asyncio.to_thread(stopping.process.wait, 30)
    async with httpx.AsyncClient(base_url=survivor.base_url, timeout=30) as client:
        code, text = await _run(client, "drained")
    assert code == 200 and "event: end" in text
    roles = [m["role"] for m in await _messages(survivor.base_url, "drained")]
    assert roles == ["user", "assistant", "user", "assistant"]  # the interrupted run was completed
