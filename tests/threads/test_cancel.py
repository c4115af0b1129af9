"""Cancelling a run ("stop generating"), in-process: the outcome, the record, the race with the end.

The cross-replica cases, with real `chatbot serve` processes and the provider wire double,
are in test_cancel_replicas.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from chatbot.caller import CallerContext
from chatbot.ids import TenantId, UserId
from chatbot.threads._stream import Listener, StreamEvent
from tests.fixtures.app import running_app, services_of
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

CALLER = CallerContext(TenantId("acme"), UserId("u1"), "en-US")
EN = {"locale": "en-US"}
REMEMBER = "Please remember that my car is a 2019 Toyota Corolla and I park it on the street."


@pytest.fixture
async def slow_client(migrated_database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    # Offline answers streamed a token every 40 ms: a cancel lands mid-answer.
    async with running_app(migrated_database_url, offline_token_delay_ms=40) as client:
        yield client


def runs_of(client: httpx.AsyncClient) -> Any:
    return services_of(client).runs


async def until_token(listener: Listener) -> list[StreamEvent]:
    seen = []
    while True:
        event = await asyncio.wait_for(listener.queue.get(), 10)
        seen.append(event)
        if event.event == "token":
            return seen


async def rest(listener: Listener) -> list[StreamEvent]:
    seen: list[StreamEvent] = []
    while not seen or seen[-1].event not in ("end", "error"):
        seen.append(await asyncio.wait_for(listener.queue.get(), 10))
    return seen


def cancel_url(thread: str, run_id: str) -> str:
    return f"/v1/threads/{thread}/runs/{run_id}/cancel"


async def ask(client: httpx.AsyncClient, thread: str, content: str, **token: Any) -> httpx.Response:
    headers = {"Accept": "application/json", **auth(**(token or EN))}
    return await client.post(f"/v1/threads/{thread}/runs", json={"message": {"content": content}}, headers=headers)


async def test_a_run_cancelled_mid_answer_ends_cancelled_keeps_what_was_shown_and_frees_the_thread(
    slow_client: httpx.AsyncClient,
) -> None:
    runs = runs_of(slow_client)
    listener = await runs.start("stop-1", CALLER, REMEMBER)
    events = await until_token(listener)
    response = await slow_client.post(cancel_url("stop-1", listener.run_id), headers=auth(**EN))
    assert response.status_code == 202, response.text
    events += await rest(listener)
    names = [e.event for e in events]
    assert names.count("error") == 1 and "end" not in names and names[-1] == "error"
    problem = events[-1].data
    assert problem["status"] == 409 and problem["reason"] == "cancelled"
    shown = "".join(e.piece for e in events if e.event == "token")
    assert shown

    # The thread is free: the next message is accepted (and answered) at once.
    assert (await ask(slow_client, "stop-1", "What does travel insurance cover?")).status_code == 200

    record = (await slow_client.get(f"/v1/threads/stop-1/runs/{listener.run_id}", headers=auth(**EN))).json()
    assert record["status"] == "cancelled"
    assert record["answer"]["content"] == shown and record["answer"]["complete"] is False
    assert record["input"]["content"] == REMEMBER
    messages = (await slow_client.get("/v1/threads/stop-1/messages", headers=auth(**EN))).json()["messages"]
    ours = [m for m in messages if m["run_id"] == listener.run_id]
    assert [m["role"] for m in ours] == ["user"]  # the question stays, the cut answer is not in it
    await runs_of(slow_client).drain(5)
    await services_of(slow_client).memory.drain(5)
    memory = (await slow_client.get("/v1/users/u1/memory", headers=auth(**EN))).json()
    assert memory["facts"] == []  # nothing the cancelled turn asked to remember was kept

    # A rejoin (and a replay from the record) ends with the same cancelled error.
    replay = await slow_client.get(f"/v1/threads/stop-1/runs/{listener.run_id}/stream", headers=auth(**EN))
    assert replay.status_code == 200 and '"reason":"cancelled"' in replay.text.replace(" ", "")
    metrics = (await slow_client.get("/metrics")).text
    assert 'chatbot_runs_total{status="cancelled"}' in metrics


async def test_a_cancel_after_the_end_is_409_and_changes_nothing(slow_client: httpx.AsyncClient) -> None:
    answered = await ask(slow_client, "stop-2", "What does travel insurance cover?")
    run_id = answered.json()["run_id"]
    response = await slow_client.post(cancel_url("stop-2", run_id), headers=auth(**EN))
    assert response.status_code == 409 and response.headers["content-type"].startswith("application/problem+json")
    record = (await slow_client.get(f"/v1/threads/stop-2/runs/{run_id}", headers=auth(**EN))).json()
    assert record["status"] == answered.json()["status"] and record["answer"]["complete"] is True
    # Twice is the same: a cancelled run, once over, cannot be cancelled again.
    listener = await runs_of(slow_client).start("stop-2", CALLER, "What does travel insurance cover?")
    await until_token(listener)
    first = await slow_client.post(cancel_url("stop-2", listener.run_id), headers=auth(**EN))
    again = await slow_client.post(cancel_url("stop-2", listener.run_id), headers=auth(**EN))
    assert (first.status_code, again.status_code) == (202, 409)


@pytest.mark.parametrize(
    ("run_id", "token"),
    [
        ("3f0c9a52-8d1e-4b7a-9c64-2e5d1f7a8b90", EN),  # no such run on the thread
        ("not-a-run-id", EN),
        (None, {"tenant": "other", **EN}),  # another tenant's thread
        (None, {"user": "u2", **EN}),  # another user's thread
    ],
)
async def test_a_cancel_of_an_unknown_run_or_of_another_callers_thread_is_404(
    slow_client: httpx.AsyncClient, run_id: str | None, token: dict[str, str]
) -> None:
    listener = await runs_of(slow_client).start("stop-3", CALLER, "What does travel insurance cover?")
    await until_token(listener)
    response = await slow_client.post(cancel_url("stop-3", run_id or listener.run_id), headers=auth(**token))
    assert response.status_code == 404, response.text
    # The owner's run went on: still in flight, its owner can stop it.
    assert (await slow_client.post(cancel_url("stop-3", listener.run_id), headers=auth(**EN))).status_code == 202


async def test_a_cancelled_run_in_json_mode_answers_the_409_problem(slow_client: httpx.AsyncClient) -> None:
    waiting = asyncio.create_task(ask(slow_client, "stop-4", "What does travel insurance cover?"))
    runs = runs_of(slow_client)
    started = await wait_until(
        lambda: [r for r, s in runs._runs.items() if s.thread_id == "stop-4"], what="the run started on this replica"
    )
    (run_id,) = started
    await until_token(runs._runs[run_id].stream.listen())
    assert (await slow_client.post(cancel_url("stop-4", run_id), headers=auth(**EN))).status_code == 202
    response = await waiting
    assert response.status_code == 409 and response.json()["reason"] == "cancelled"


async def test_a_cancel_racing_the_end_has_exactly_one_outcome(migrated_database_url: str) -> None:
    # Offline answers streamed a piece every 2 ms (tens of ms a run): the cancel lands anywhere
    # from before the first token to after the end. Without the delay a run of a few round trips
    # could end before a cancel sent at once was decided, and "the cancel wins" was a race too.
    rng = random.Random(21)
    async with running_app(migrated_database_url, offline_token_delay_ms=2) as client:
        runs = runs_of(client)
        outcomes = {True: 0, False: 0}
        for turn in range(50):  # not polling: races at random offsets, not a wait
            thread = f"race-{turn}"
            listener = await runs.start(thread, CALLER, "Hi")
            # Even turns cancel at once (the cancel wins); odd ones anywhere up to well past the end.
            await asyncio.sleep(0 if turn % 2 == 0 else rng.uniform(0, 0.1))  # not polling: the race's offset
            cancelled = await runs.cancel(thread, listener.run_id)
            events = await rest(listener)
            terminal = [e for e in events if e.event in ("end", "error")]
            assert len(terminal) == 1, (turn, events)
            record = (await client.get(f"/v1/threads/{thread}/runs/{listener.run_id}", headers=auth(**EN))).json()
            messages = (await client.get(f"/v1/threads/{thread}/messages", headers=auth(**EN))).json()["messages"]
            if cancelled:
                assert terminal[0].data["reason"] == "cancelled", (turn, terminal)
                assert record["status"] == "cancelled", turn
                assert [m["role"] for m in messages] == ["user"], turn
            else:
                assert terminal[0].event == "end", (turn, terminal)
                assert record["status"] == terminal[0].data["status"], turn
                assert [m["role"] for m in messages] == ["user", "assistant"], turn
            outcomes[cancelled] += 1
    assert outcomes[True] >= 25, outcomes  # the other side depends on this machine's speed: not asserted


async def test_a_cancel_closes_the_providers_stream(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ProviderDouble() as double:
        double.default = Behaviour(answer="x" * 2000, piece_delay=0.02)
        async with running_app(
            migrated_database_url, model="openai:gpt-4o-mini", model_base_url=double.openai_base_url
        ) as client:
            listener = await runs_of(client).start("stop-5", CALLER, "What does travel insurance cover?")
            await until_token(listener)
            assert (await client.post(cancel_url("stop-5", listener.run_id), headers=auth(**EN))).status_code == 202
            assert (await rest(listener))[-1].data["reason"] == "cancelled"
            assert await double.async_wait_for(lambda d: bool(d.disconnected))
            (request,) = double.requests
            assert request.disconnected and not request.completed
            assert request.pieces_sent < 2000 // 4


async def test_a_cancel_whose_notice_is_lost_still_ends_the_run_cancelled_at_its_final_write(
    migrated_database_url: str,
) -> None:
    # Two replicas in one process; A stops listening, as while its session reconnects.
    async with (
        running_app(migrated_database_url, offline_token_delay_ms=20) as a,
        running_app(migrated_database_url) as b,
    ):
        await services_of(a).cancels.stop()
        listener = await runs_of(a).start("stop-6", CALLER, "What does travel insurance cover?")
        seen = await until_token(listener)
        assert (await b.post(cancel_url("stop-6", listener.run_id), headers=auth(**EN))).status_code == 202
        seen += await rest(listener)
        # A never heard of it: the answer went on, but its end was refused by the fence.
        assert seen[-1].event == "error" and seen[-1].data["reason"] == "cancelled"
        assert "end" not in [e.event for e in seen]
        record = (await b.get(f"/v1/threads/stop-6/runs/{listener.run_id}", headers=auth(**EN))).json()
        assert record["status"] == "cancelled" and record["answer"]["complete"] is False
        assert record["answer"]["content"] == "".join(e.piece for e in seen if e.event == "token")
        assert (await ask(b, "stop-6", "Thanks")).status_code == 200
