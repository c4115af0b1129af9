"""The runs endpoint, in-process: event order, statuses, failures, busy threads, tenancy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from chatbot.ids import ThreadId
from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_of_threads
from tests.fixtures.messages import send_for_events
from tests.fixtures.models import ScriptedChatModel, StreamingChatModel
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

EN = {"locale": "en-US"}


@pytest.fixture
async def kb_client(kb_database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(kb_database_url) as c:
        yield c


def check_order(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    names = [name for name, _ in events]
    assert names[0] == "metadata" and names[-1] == "end"
    assert names.count("end") == 1 and "error" not in names
    body = names[1:-1]
    assert body == sorted(body, key=lambda n: {"progress": 0, "token": 1}[n])  # progress, then tokens
    end = events[-1][1]
    assert events[0][1] == {"run_id": end["run_id"], "thread_id": end["thread_id"]}
    assert "".join(d["content"] for n, d in events if n == "token") == end["message"]["content"]
    return end


async def test_english_question_is_answered_from_the_knowledge_base(kb_client: httpx.AsyncClient) -> None:
    events = await send_for_events(
        kb_client, "en-answer", "How do I file a car body claim and which documents do I need?", **EN
    )
    end = check_order(events)
    assert end["status"] == "answered"
    assert end["citations"] and end["handoff_context"] is None
    assert any(n == "progress" for n, _ in events)


async def test_persian_question_is_answered_in_persian(kb_client: httpx.AsyncClient) -> None:
    question = "بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟"
    events = await send_for_events(kb_client, "fa-answer", question)
    end = check_order(events)
    assert end["status"] == "answered" and end["citations"]
    assert any("\u0600" <= ch <= "\u06ff" for ch in end["message"]["content"])


@pytest.mark.parametrize(("content", "token"), [("qwzx plorf", EN), ("ببببب ججججج", {})], ids=["en", "fa"])
async def test_unanswerable_question_gets_a_clarifying_question(
    kb_client: httpx.AsyncClient, content: str, token: dict[str, str]
) -> None:
    end = check_order(await send_for_events(kb_client, f"clarify-{token.get('locale', 'fa')}", content, **token))
    assert end["status"] == "clarifying"
    assert end["citations"] == [] and end["handoff_context"] is None


@pytest.mark.parametrize(
    ("content", "token"), [("I want to talk to a human", EN), ("می‌خواهم با کارشناس صحبت کنم", {})], ids=["en", "fa"]
)
async def test_asking_for_a_person_escalates_with_handoff_context(
    kb_client: httpx.AsyncClient, content: str, token: dict[str, str]
) -> None:
    thread = f"escalate-{token.get('locale', 'fa')}"
    await send_for_events(kb_client, thread, "What does travel insurance cover for medical costs abroad?", **token)
    end = check_order(await send_for_events(kb_client, thread, content, **token))
    assert end["status"] == "escalate"
    handoff = end["handoff_context"]
    assert set(handoff) == {"reason", "conversation_summary", "user_profile", "recent_messages"}
    assert handoff["recent_messages"][-1] == {"role": "user", "content": content}
    assert handoff["recent_messages"][0]["role"] == "user"
    assert handoff["conversation_summary"]


async def test_repeatedly_unanswerable_questions_escalate(kb_client: httpx.AsyncClient) -> None:
    statuses = []
    for _ in range(3):
        statuses.append(check_order(await send_for_events(kb_client, "stuck", "qwzx plorf", **EN))["status"])
    assert statuses == ["clarifying", "clarifying", "escalate"]


async def test_json_mode_returns_the_end_object(kb_client: httpx.AsyncClient) -> None:
    question = "What does travel insurance cover for medical costs abroad?"
    sse_end = check_order(await send_for_events(kb_client, "json-a", question, **EN))
    response = await kb_client.post(
        "/v1/threads/json-b/runs",
        json={"message": {"content": question}},
        headers={**auth(**EN), "Accept": "application/json"},
    )
    assert response.status_code == 200
    body = response.json()
    assert set(body) == set(sse_end)
    assert body["thread_id"] == "json-b" and body["status"] == sse_end["status"]
    assert body["message"]["content"] == sse_end["message"]["content"]
    assert body["citations"] == sse_end["citations"]


async def test_answer_and_question_are_in_the_transcript_when_end_is_sent(kb_client: httpx.AsyncClient) -> None:
    end = check_order(await send_for_events(kb_client, "durable", "How do I cancel my car body policy?", **EN))
    page = (await kb_client.get("/v1/threads/durable/messages", headers=auth(**EN))).json()
    assert [m["role"] for m in page["messages"]] == ["user", "assistant"]
    assert page["messages"][1]["id"] == end["message"]["id"]
    assert page["messages"][1]["citations"] == end["citations"]
    assert {m["run_id"] for m in page["messages"]} == {end["run_id"]}


async def test_another_tenant_gets_404_for_the_thread(kb_client: httpx.AsyncClient) -> None:
    await send_for_events(kb_client, "tenant-bound", "How do I renew third-party insurance?", **EN)
    for method, path, body in [("POST", "/runs", {"message": {"content": "hello there"}}), ("GET", "/messages", None)]:
        response = await kb_client.request(
            method, f"/v1/threads/tenant-bound{path}", json=body, headers=auth(tenant="globex")
        )
        assert response.status_code == 404


async def test_a_second_run_on_a_busy_thread_gets_409_and_the_thread_is_free_after_end(
    kb_database_url: str,
) -> None:
    async with running_app(kb_database_url, offline_token_delay_ms=20) as client:
        body = {"message": {"content": "What does travel insurance cover for medical costs abroad?"}}
        first = asyncio.create_task(client.post("/v1/threads/busy/runs", json=body, headers=auth(**EN)))
        locks = services_of(client).locks
        await wait_until(
            lambda: locks.holds_thread(ThreadId("busy")) or first.done(), what="the first run holding the thread"
        )
        second = await client.post("/v1/threads/busy/runs", json=body, headers=auth(**EN))
        assert second.status_code == 409
        assert second.headers["content-type"].startswith("application/problem+json")
        assert (await first).status_code == 200
        again = await client.post("/v1/threads/busy/runs", json=body, headers=auth(**EN))
        assert again.status_code == 200


async def test_a_failing_model_sends_error_and_the_next_run_succeeds(kb_database_url: str) -> None:
    failing = ScriptedChatModel(mode="fail")
    async with running_app(kb_database_url, agent_overrides={"chat_model": failing}) as client:
        events = await send_for_events(client, "model-fails", "How do I renew third-party insurance?", **EN)
        assert next(n for n, _ in events) == "metadata" and events[-1][0] == "error"
        assert events[-1][1]["status"] == 502
        failing.mode = "answer"
        failing.reply = {"status": "answered", "answer": "Renew within 30 days.", "citations": []}
        end = check_order(await send_for_events(client, "model-fails", "How do I renew it?", **EN))
        assert end["status"] == "answered" and end["message"]["content"] == "Renew within 30 days."
        page = (await client.get("/v1/threads/model-fails/messages", headers=auth(**EN))).json()
        roles = [m["role"] for m in page["messages"]]
        assert roles == ["user", "user", "assistant"]  # the failed turn's message stays in the record


async def test_a_hanging_model_times_out_with_504_in_json_mode(kb_database_url: str) -> None:
    async with running_app(
        kb_database_url,
        model_timeout_seconds=0.5,
        agent_overrides={"chat_model": ScriptedChatModel(mode="hang"), "model_timeout_seconds": 0.5},
    ) as client:
        response = await client.post(
            "/v1/threads/hangs/runs",
            json={"message": {"content": "hello, anyone?"}},
            headers={**auth(**EN), "Accept": "application/json"},
        )
        assert response.status_code == 504
        assert response.headers["content-type"].startswith("application/problem+json")
        free = await client.post(
            "/v1/threads/hangs/runs",
            json={"message": {"content": "hello again"}},
            headers={**auth(**EN), "Accept": "application/json"},
        )
        assert free.status_code == 504  # the lock was released: not a 409


async def test_garbage_from_the_model_falls_back_to_a_clarifying_question(kb_database_url: str) -> None:
    async with running_app(kb_database_url, agent_overrides={"chat_model": ScriptedChatModel(mode="garbage")}) as c:
        end = check_order(await send_for_events(c, "garbage", "How do I renew third-party insurance?", **EN))
    assert end["status"] == "clarifying" and end["citations"] == []


async def test_rate_limit_answers_429_with_retry_after(kb_database_url: str) -> None:
    async with running_app(kb_database_url, rate_limit_per_minute=2) as client:
        body = {"message": {"content": "How do I renew third-party insurance?"}}
        codes = []
        for i in range(3):
            r = await client.post(f"/v1/threads/rl-{i}/runs", json=body, headers=auth(user="limited", **EN))
            codes.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1
        assert codes == [200, 200, 429]
        other = await client.post("/v1/threads/rl-x/runs", json=body, headers=auth(user="someone-else", **EN))
        assert other.status_code == 200


async def test_first_runs_refused_by_the_rate_limit_leave_no_row_behind(kb_database_url: str) -> None:
    # Each refused first run took the thread's lock, which writes the thread's fence row, and
    # left it: 32 first runs at 2 a minute made 2 threads and 32 rows that neither retention
    # nor erasure (both find threads by their checkpoints) would ever delete.
    ids = [f"fresh-{uuid.uuid4().hex[:8]}" for _ in range(12)]
    body = {"message": {"content": "qwzx plorf"}}
    async with running_app(kb_database_url, rate_limit_per_minute=2) as client:
        codes = [
            (await client.post(f"/v1/threads/{t}/runs", json=body, headers=auth(user="fresh-ids", **EN))).status_code
            for t in ids
        ]
    assert codes == [200, 200] + [429] * 10
    started = rows_of_threads(kb_database_url, ids[:2])
    assert started["checkpoints"] and started["thread_fences"] == 2  # the two threads that started
    left = rows_of_threads(kb_database_url, ids[2:])
    assert left == dict.fromkeys(left, 0), left


async def test_a_streaming_model_streams_its_answer_and_cites_only_retrieved_chunks(kb_database_url: str) -> None:
    answer = "You can renew third-party insurance up to 30 days after it ends; no inspection is needed."
    model = StreamingChatModel(
        mode="answer", reply={"status": "answered", "answer": answer, "citations": ["made-up#1"]}
    )
    # Flushing every token as it comes: this is about how the model's output reaches the stream.
    async with running_app(kb_database_url, agent_overrides={"chat_model": model}, sse_flush_ms=0) as client:
        events = await send_for_events(client, "streams", "How do I renew third-party insurance?", **EN)
    end = check_order(events)
    tokens = [d["content"] for n, d in events if n == "token"]
    assert len(tokens) > 5  # arrived in pieces, as the model produced them
    assert end["message"]["content"] == answer and end["status"] == "answered"
    assert end["citations"] == []  # an id that was not retrieved this turn is dropped
