"""The service through the real provider packages, against the wire double: every answer complete,
every failure named, every token counted (docs/contract.md, "Real models").

Each case runs on the three ways a structured answer travels: OpenAI `response_format`
json_schema (gpt-4o*), an OpenAI forced tool call (gpt-4-turbo) and an Anthropic forced
tool (`input_json_delta`), whose base URL is given in the `/v1` form the OpenAI docs show.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tests.fixtures.app import parse_sse, running_app, services_of
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.provider_double import Behaviour, ProviderDouble, english_answer, persian_answer
from tests.fixtures.tokens import auth

EN = {"locale": "en-US"}
QUESTION = "What does travel insurance cover for medical costs abroad?"
PATHS = {
    "openai-json-schema": ("openai:gpt-4o-mini", "openai"),
    "openai-tools": ("openai:gpt-4-turbo", "openai"),
    "anthropic": ("anthropic:claude-haiku-4-5", "anthropic"),
}


@pytest.fixture(scope="module")
def kb_database_url(migrated_database_url: str) -> str:
    asyncio.run(load_demo_kb(migrated_database_url))
    return migrated_database_url


@pytest.fixture(scope="module")
def double() -> Iterator[ProviderDouble]:
    with ProviderDouble() as d:
        yield d


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch, double: ProviderDouble) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    double.reset()


@pytest.fixture(params=list(PATHS))
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def base_url(double: ProviderDouble, provider: str) -> str:
    # Anthropic in the /v1 form: the SDK appends /v1 itself, so the service must normalise it.
    return double.openai_base_url if provider == "openai" else double.anthropic_base_url + "/v1"


@asynccontextmanager
async def service(url: str, double: ProviderDouble, path: str, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    spec, provider = PATHS[path]
    async with running_app(url, model=spec, model_base_url=base_url(double, provider), **settings) as client:
        yield client


async def run(client: httpx.AsyncClient, thread: str, content: str = QUESTION) -> list[tuple[str, dict[str, Any]]]:
    response = await client.post(
        f"/v1/threads/{thread}/runs", json={"message": {"content": content}}, headers=auth(**EN)
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


async def record(client: httpx.AsyncClient, thread: str, run_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/threads/{thread}/runs/{run_id}", headers=auth(**EN))
    assert response.status_code == 200, response.text
    return dict(response.json())


async def transcript(client: httpx.AsyncClient, thread: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/threads/{thread}/messages", headers=auth(**EN))
    assert response.status_code == 200
    return list(response.json()["messages"])


async def metric(client: httpx.AsyncClient, name: str, **labels: str) -> float:
    text = (await client.get("/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def shown(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(d["content"] for n, d in events if n == "token")


async def test_a_normal_answer_is_answered_with_its_usage_recorded(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    answer = persian_answer(600)
    double.default = Behaviour(answer=answer, usage=(120, 45, 20))
    async with service(kb_database_url, double, path) as client:
        events = await run(client, f"ok-{path}")
        name, end = events[-1]
        assert name == "end" and end["status"] == "answered", events[-1]
        assert end["message"]["content"] == answer == shown(events)
        rec = await record(client, f"ok-{path}", end["run_id"])
        tokens = await metric(client, "chatbot_model_tokens_total", tenant_id="acme", direction="output")
    assert rec["answer"]["complete"] is True and rec["model"] == PATHS[path][0]
    (call,) = rec["usage"]
    assert call == {
        "kind": "answer",
        "model": PATHS[path][0],
        "input_tokens": 120,
        "output_tokens": 45,
        "cached_input_tokens": 20,
    }
    assert tokens >= 45
    (request,) = double.requests
    assert request.stream
    if PATHS[path][1] == "openai":
        assert request.include_usage  # asked even with a base URL set


@pytest.mark.parametrize("finish", ["length", "cut", "cut_connection"])
async def test_an_answer_that_stops_short_is_an_error_and_never_enters_the_transcript(
    kb_database_url: str, double: ProviderDouble, path: str, finish: str
) -> None:
    double.default = Behaviour(answer=english_answer(1500), finish=finish)  # type: ignore[arg-type]
    thread = f"short-{finish}-{path}"
    async with service(kb_database_url, double, path) as client:
        events = await run(client, thread, "Remember that I prefer email. " + QUESTION)
        name, problem = events[-1]
        assert name == "error", events[-1]
        assert (problem["status"], problem["reason"]) == (502, "model_incomplete")
        seen = shown(events)
        assert 0 < len(seen) < 1500
        rec = await record(client, thread, events[0][1]["run_id"])
        messages = await transcript(client, thread)
        await services_of(client).memory.drain(30)  # memory work, had the turn asked for any, is done
        memory = (await client.get("/v1/users/u1/memory", headers=auth(**EN))).json()
    assert rec["status"] == "error"
    assert rec["answer"] == {"id": rec["answer"]["id"], "content": seen, "complete": False}
    assert [m["role"] for m in messages] == ["user"]  # the question stays, the cut answer does not
    assert memory["facts"] == [] and len(double.requests) == 1  # no memory call, nothing remembered


async def test_a_refusal_is_an_escalation_not_an_outage(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    double.default = Behaviour(finish="refusal")
    async with service(kb_database_url, double, path) as client:
        before = await metric(client, "chatbot_model_errors_total")
        events = await run(client, f"refused-{path}")
        after = await metric(client, "chatbot_model_errors_total")
        refused = await metric(client, "chatbot_model_calls_total", outcome="refused")
    name, end = events[-1]
    assert name == "end" and end["status"] == "escalate", events[-1]
    assert end["handoff_context"]["reason"] == "model_refused"
    assert end["message"]["content"] == shown(events)
    assert after == before and refused >= 1


async def test_a_rate_limit_is_503_with_the_providers_retry_after(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    # The client retries once after the provider's Retry-After; then the run names it.
    double.default = Behaviour(http_status=429, retry_after=1)
    async with service(kb_database_url, double, path) as client:
        events = await run(client, f"limited-{path}")
        response = await client.post(
            f"/v1/threads/limited-json-{path}/runs",
            json={"message": {"content": QUESTION}},
            headers=auth(**EN) | {"Accept": "application/json"},
        )
    name, problem = events[-1]
    assert name == "error" and (problem["status"], problem["reason"]) == (503, "model_rate_limited")
    assert problem["retry_after"] == 1
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["reason"] == "model_rate_limited"


async def test_a_healthy_stream_longer_than_the_first_token_and_idle_bounds_is_not_cut(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    answer = english_answer(120)
    double.default = Behaviour(answer=answer, piece_chars=4, piece_delay=0.05, first_byte_delay=0.2)
    bounds = {"model_first_token_timeout_seconds": 1.0, "model_idle_timeout_seconds": 0.5}
    async with service(kb_database_url, double, path, **bounds) as client:
        events = await run(client, f"long-{path}")  # ~1.7 s in all: longer than either bound
    name, end = events[-1]
    assert name == "end" and end["message"]["content"] == answer, events[-1]


async def test_a_stalled_stream_is_a_timeout_that_keeps_what_was_shown(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    double.default = Behaviour(answer=english_answer(200), piece_chars=20, piece_delay=1.2)
    async with service(kb_database_url, double, path, model_idle_timeout_seconds=0.4) as client:
        events = await run(client, f"stalled-{path}")
        rec = await record(client, f"stalled-{path}", events[0][1]["run_id"])
    name, problem = events[-1]
    assert name == "error" and (problem["status"], problem["reason"]) == (504, "model_timeout")
    assert rec["answer"]["complete"] is False and rec["answer"]["content"] == shown(events) != ""


async def test_unusable_output_is_a_clarifying_question_that_is_counted(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    double.default = Behaviour(raw_json='{"status": "answered", "answer": 42')
    async with service(kb_database_url, double, path) as client:
        before = await metric(client, "chatbot_model_calls_total", outcome="unusable")
        events = await run(client, f"garbage-{path}")
        after = await metric(client, "chatbot_model_calls_total", outcome="unusable")
    name, end = events[-1]
    assert name == "end" and end["status"] == "clarifying"
    assert after == before + 1


async def test_an_error_event_inside_a_200_stream_is_counted_with_the_status_it_means(
    kb_database_url: str, double: ProviderDouble
) -> None:
    double.default = Behaviour(finish="error_event")
    async with service(kb_database_url, double, "anthropic") as client:
        events = await run(client, "error-event")
        overloaded = await metric(client, "chatbot_model_errors_total", status="529")
        as_200 = await metric(client, "chatbot_model_errors_total", status="200")
    assert events[-1][0] == "error"
    assert overloaded >= 1 and as_200 == 0


async def test_the_chain_falls_back_before_the_first_token_and_records_who_answered(
    kb_database_url: str, double: ProviderDouble
) -> None:
    # Every try of the first entry fails (the client retries once by itself).
    double.script("gpt-4o-mini", *[Behaviour(http_status=503) for _ in range(3)])
    urls = f"{double.openai_base_url},{double.anthropic_base_url}"
    chain = "openai:gpt-4o-mini,anthropic:claude-haiku-4-5"
    async with running_app(kb_database_url, model=chain, model_base_urls=urls) as client:
        before = await metric(client, "chatbot_model_fallbacks_total")
        events = await run(client, "fallback")
        rec = await record(client, "fallback", events[0][1]["run_id"])
        after = await metric(client, "chatbot_model_fallbacks_total")
    assert events[-1][0] == "end" and events[-1][1]["status"] == "answered"
    assert rec["model"] == "anthropic:claude-haiku-4-5"
    assert [u["model"] for u in rec["usage"]] == ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"]
    assert after == before + 1


async def test_a_conversation_makes_one_provider_call_per_answered_question(
    kb_database_url: str, double: ProviderDouble
) -> None:
    async with service(kb_database_url, double, "openai-json-schema") as client:
        for turn in range(6):
            events = await run(client, "calls", f"{QUESTION} ({turn})")
            assert events[-1][1]["status"] == "answered"
        await services_of(client).memory.drain(30)  # memory work, if any, has run
    assert len(double.requests) == 6  # no extraction call beside each answer


async def test_long_answers_fold_into_the_summary_long_before_the_turn_threshold(
    kb_database_url: str, double: ProviderDouble
) -> None:
    double.default = Behaviour(answer=english_answer(3000), text="- the customer asked about travel cover")
    async with service(kb_database_url, double, "openai-json-schema", context_tokens=3000) as client:
        ends = [(await run(client, "long-answers", f"{QUESTION} ({turn})"))[-1][1] for turn in range(10)]
        last = await record(client, "long-answers", ends[-1]["run_id"])
    assert all(end["status"] == "answered" for end in ends)
    # The window holds four turns here; by turn 10 the first turns that left it are folded,
    # far below summary_after_turns (20), which used to be the first fold.
    assert len(last["context"]["messages"]) <= 9
    assert last["context"]["summary"] != ""
    kinds = [u["kind"] for u in last["usage"]]
    assert kinds[-1] == "answer"


async def test_a_hung_summary_call_delays_the_answer_by_its_own_bound_only(
    kb_database_url: str, double: ProviderDouble
) -> None:
    double.default = Behaviour(answer=english_answer(3000))
    # The summary model (a cheaper one) hangs on every call; the answer model is healthy.
    double.script("gpt-4o", *[Behaviour(text="- summary", first_byte_delay=30) for _ in range(8)])
    settings = {"summary_timeout_seconds": 0.5, "summary_model": "openai:gpt-4o", "context_tokens": 2000}
    async with service(kb_database_url, double, "openai-json-schema", **settings) as client:
        for turn in range(8):
            events = await run(client, "hung-summary", f"{QUESTION} ({turn})")
            assert events[-1][0] == "end"
    summaries = [r for r in double.requests if r.model == "gpt-4o"]
    assert summaries  # a fold was tried
    # ...and given up at the summary's 0.5 s bound: its client left each one before the
    # provider's first byte (30 s), no answer waited for it to end.
    assert await double.async_wait_for(lambda _: all(r.disconnected for r in summaries))
    assert not any(r.completed for r in summaries)


CALL_TOKENS_MAX = 10_000_000  # docs/records.md: one call's counts are clamped to [0, this]


async def post_within(client: httpx.AsyncClient, thread: str, tenant: str) -> list[tuple[str, dict[str, Any]]]:
    """Send a message and read its whole stream, failing (not hanging) when it has no end within 20 s."""
    response = await asyncio.wait_for(
        client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": QUESTION}},
            headers=auth(tenant=tenant, **EN),
        ),
        20,
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


@pytest.mark.parametrize("reported", ["huge", "negative"])
async def test_odd_token_counts_are_clamped_where_they_enter_and_the_run_always_ends(
    kb_database_url: str, double: ProviderDouble, path: str, reported: str
) -> None:
    double.default = Behaviour(usage=(10**30, 2**63, 10**30) if reported == "huge" else (-5, -7, -1))
    tenant = f"odd-{reported}-{path}"
    async with service(kb_database_url, double, path) as client:
        pool = client.app.state.services.pool  # type: ignore[attr-defined]
        async with pool.connection() as conn:
            # A tenant whose daily totals are already at the top of bigint: the addition saturates.
            await conn.execute(
                "insert into model_usage_daily (tenant_id, day, model, kind, calls, input_tokens, output_tokens,"
                " cached_input_tokens) values (%s, (now() at time zone 'utc')::date, %s, 'answer', 1, %s, %s, 0)",
                (tenant, PATHS[path][0], 2**63 - 2, 2**63 - 2),
            )
        for turn in range(2):
            events = await post_within(client, f"{tenant}-{turn}", tenant)
            name, end = events[-1]
            assert name == "end" and end["status"] == "answered", events[-1]
        rec = await client.get(f"/v1/threads/{tenant}-1/runs/{end['run_id']}", headers=auth(tenant=tenant, **EN))
        (call,) = rec.json()["usage"]
        expected = CALL_TOKENS_MAX if reported == "huge" else 0
        assert (call["input_tokens"], call["output_tokens"]) == (expected, expected)
        assert call["cached_input_tokens"] <= call["input_tokens"]
        async with pool.connection() as conn:
            row = await (
                await conn.execute(
                    "select calls, input_tokens, output_tokens from model_usage_daily where tenant_id = %s", (tenant,)
                )
            ).fetchone()
    assert row is not None and row["calls"] == 3
    top = 2**63 - 1 if reported == "huge" else 2**63 - 2
    assert (row["input_tokens"], row["output_tokens"]) == (top, top)


async def test_line_separators_in_an_answer_reach_the_user_whole(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    # U+2028, U+2029 and U+0085 are not SSE line ends: a provider writes them raw inside its JSON.
    answer = "Line one\u2028line two\u2029line three\u0085and the rest\x0b\x0c\x1c of it, " + english_answer(200)
    double.default = Behaviour(answer=answer, piece_chars=7)
    async with service(kb_database_url, double, path) as client:
        events = await run(client, f"separators-{path}")
    name, end = events[-1]
    assert name == "end" and end["status"] == "answered", events[-1]
    assert end["message"]["content"] == answer == shown(events)


@pytest.mark.parametrize("path", ["openai-json-schema", "openai-tools"])
async def test_a_providers_huge_retry_after_is_passed_on_bounded(
    kb_database_url: str, double: ProviderDouble, path: str
) -> None:
    # OpenAI's SDK retries at once when the wait is over 60 s, so the run ends with the 429.
    # (Anthropic's SDK sleeps whatever the provider asks before its retry: that run ends at
    # the answer's total time limit instead, a 504, never waiting longer.)
    double.default = Behaviour(http_status=429, retry_after=999999)
    async with service(kb_database_url, double, path) as client:
        response = await client.post(
            f"/v1/threads/limited-huge-{path}/runs",
            json={"message": {"content": QUESTION}},
            headers=auth(**EN) | {"Accept": "application/json"},
        )
    assert response.status_code == 503 and response.json()["reason"] == "model_rate_limited"
    # docs/api.md: a provider's wait is passed on up to 300 s.
    assert response.json()["retry_after"] == 300 and response.headers["retry-after"] == "300"
