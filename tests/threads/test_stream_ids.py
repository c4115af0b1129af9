"""Stream ids, keep-alives, Location and replays of finished runs, in-process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from chatbot.errors import Problem
from chatbot.ids import RunId
from chatbot.threads.rejoin import parse_last_event_id
from tests.fixtures.app import running_app
from tests.fixtures.messages import send_message
from tests.fixtures.sse import Event, answer_of, parse_blocks
from tests.fixtures.tokens import auth

QUESTION = {"message": {"content": "What does travel insurance cover for medical costs abroad?"}}
EN = {"locale": "en-US"}


@pytest.fixture
async def client(kb_database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(kb_database_url) as c:
        yield c


async def _run(client: httpx.AsyncClient, thread: str) -> tuple[httpx.Response, list[Event]]:
    response = await send_message(client, thread, QUESTION["message"]["content"], **EN)
    assert response.status_code == 200, response.text
    return response, parse_blocks(response.text)[0]


async def _rejoin(
    client: httpx.AsyncClient, thread: str, run_id: str, last_event_id: str | None = None, **token: str
) -> httpx.Response:
    headers = auth(**{**EN, **token})
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    return await client.get(f"/v1/threads/{thread}/runs/{run_id}/stream", headers=headers)


async def test_every_event_id_is_the_run_and_the_answer_offset_so_far(client: httpx.AsyncClient) -> None:
    _, events = await _run(client, "ids")
    run_id = events[0].data["run_id"]
    delivered = 0
    for event in events:
        if event.event == "token":
            delivered += len(event.data["content"])
        assert event.id == f"{run_id}:{delivered}", event
    assert events[0].event == "metadata" and events[0].offset == 0
    end = events[-1]
    assert end.event == "end" and end.offset == len(end.data["message"]["content"]) == len(answer_of(events))


async def test_persian_offsets_count_code_points(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/threads/ids-fa/runs", json={"message": {"content": "بیمه سفر هزینه درمان را پوشش می‌دهد؟"}}, headers=auth()
    )
    events = parse_blocks(response.text)[0]
    answer = events[-1].data["message"]["content"]
    assert any(ord(ch) > 0x600 for ch in answer)
    assert events[-1].offset == len(answer) and answer_of(events) == answer


async def test_the_response_names_where_its_stream_can_be_rejoined(client: httpx.AsyncClient) -> None:
    response, events = await _run(client, "located")
    run_id = events[0].data["run_id"]
    assert response.headers["location"] == f"/v1/threads/located/runs/{run_id}/stream"
    as_json = await client.post(
        "/v1/threads/located/runs", json=QUESTION, headers={**auth(**EN), "Accept": "application/json"}
    )
    assert as_json.headers["location"] == f"/v1/threads/located/runs/{as_json.json()['run_id']}/stream"


async def test_a_slow_model_keeps_the_stream_alive_with_comments(kb_database_url: str) -> None:
    async with running_app(kb_database_url, offline_token_delay_ms=120, sse_keepalive_seconds=0.05) as slow:
        response = await slow.post("/v1/threads/slow/runs", json=QUESTION, headers=auth(**EN))
    events, comments = parse_blocks(response.text)
    assert ": keep-alive\n\n" in response.text and comments >= 3
    assert events[-1].event == "end"


async def test_a_finished_run_is_replayed_from_the_record(client: httpx.AsyncClient) -> None:
    _, original = await _run(client, "replayed")
    run_id, answer = original[0].data["run_id"], original[-1].data["message"]["content"]
    await _run(client, "replayed")  # a later run does not change what the first one said
    whole = parse_blocks((await _rejoin(client, "replayed", run_id)).text)[0]
    assert [e.event for e in whole] == ["metadata", "token", "end"]
    assert answer_of(whole) == answer and whole[-1].data == original[-1].data
    assert [e.id for e in whole] == [f"{run_id}:0", f"{run_id}:{len(answer)}", f"{run_id}:{len(answer)}"]

    cut = 7
    rest = parse_blocks((await _rejoin(client, "replayed", run_id, f"{run_id}:{cut}")).text)[0]
    assert rest[0].event == "metadata" and rest[0].offset == cut
    assert answer[:cut] + answer_of(rest) == answer
    assert rest[-1].data == original[-1].data


async def test_a_failed_run_is_replayed_as_its_error(kb_database_url: str) -> None:
    from tests.fixtures.models import ScriptedChatModel

    async with running_app(kb_database_url, agent_overrides={"chat_model": ScriptedChatModel(mode="fail")}) as c:
        _, events = await _run(c, "failed-replay")
        assert events[-1].event == "error" and events[-1].data["status"] == 502
        replay = parse_blocks((await _rejoin(c, "failed-replay", events[0].data["run_id"])).text)[0]
    assert [e.event for e in replay] == ["metadata", "error"]
    assert replay[-1].data == events[-1].data


async def test_rejoining_what_is_not_a_run_of_the_thread_is_404(client: httpx.AsyncClient) -> None:
    _, events = await _run(client, "mine")
    run_id = events[0].data["run_id"]
    _, other = await _run(client, "other-thread")
    assert (await _rejoin(client, "mine", str(uuid.uuid4()))).status_code == 404
    assert (await _rejoin(client, "mine", "not-a-uuid")).status_code == 404
    assert (await _rejoin(client, "mine", other[0].data["run_id"])).status_code == 404
    assert (await _rejoin(client, "no-such-thread", run_id)).status_code == 404
    assert (await _rejoin(client, "mine", run_id, tenant="globex")).status_code == 404
    assert (await _rejoin(client, "mine", run_id, user="u2")).status_code == 404
    assert (await _rejoin(client, "mine", run_id)).status_code == 200


async def test_a_last_event_id_of_another_run_or_malformed_is_422(client: httpx.AsyncClient) -> None:
    _, events = await _run(client, "bad-ids")
    run_id = events[0].data["run_id"]
    for value in (f"{uuid.uuid4()}:3", f"{run_id}:x", f"{run_id}:-1", "garbage"):
        response = await _rejoin(client, "bad-ids", run_id, value)
        assert response.status_code == 422, value
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_a_last_event_id_offset_of_non_ascii_digits_is_422_never_500(client: httpx.AsyncClient) -> None:
    # The finding: "²" is a Latin-1 header byte that `str.isdigit()` accepts and `int()` refuses.
    _, events = await _run(client, "unicode-digits")
    run_id = events[0].data["run_id"]
    latin1_digits = ["\u00b2", "\u00b3", "\u00b9", "1\u00b2", "\u00bd"]
    utf8_digits = ["\u0663", "\u2460", "\u00b2", "\uff13", "\u0969"]  # ٣ ① ² ３ ३, sent as UTF-8 bytes
    raw = [f"{run_id}:{d}".encode("latin-1") for d in latin1_digits]
    raw += [f"{run_id}:{d}".encode() for d in utf8_digits]
    raw.append(f"{run_id}:{'9' * 19}".encode())
    for value in raw:
        headers = [(k.encode(), v.encode()) for k, v in auth(**EN).items()] + [(b"Last-Event-ID", value)]
        response = await client.get(f"/v1/threads/unicode-digits/runs/{run_id}/stream", headers=headers)
        assert response.status_code == 422, value
        assert response.headers["content-type"].startswith("application/problem+json")
    # The same offset in ASCII digits still rejoins.
    assert (await _rejoin(client, "unicode-digits", run_id, f"{run_id}:2")).status_code == 200


@pytest.mark.parametrize("offset", ["\u00b2", "\u0663", "\u2460", "\uff13", "\u0969", "\U0001d7d9", "1_0", " 3", "+3"])
def test_only_ascii_digits_are_an_offset(offset: str) -> None:
    # Beyond what a Latin-1 header can carry: "٣" and "३" are digits `int()` reads as 3.
    run_id = str(uuid.uuid4())
    with pytest.raises(Problem) as refused:
        parse_last_event_id(f"{run_id}:{offset}", RunId(run_id))
    assert refused.value.status == 422
    assert parse_last_event_id(f"{run_id}:{'9' * 18}", RunId(run_id)) == 10**18 - 1


async def test_tokens_after_the_first_are_flushed_together_without_changing_the_answer(kb_database_url: str) -> None:
    counts = {}
    for flush_ms in (0, 150):
        async with running_app(kb_database_url, offline_token_delay_ms=15, sse_flush_ms=flush_ms) as c:
            _, events = await _run(c, f"flushed-{flush_ms}")
        tokens = [e for e in events if e.event == "token"]
        answer = events[-1].data["message"]["content"]
        assert answer_of(events) == answer and tokens[-1].offset == len(answer)
        counts[flush_ms] = len(tokens)
    assert counts[150] * 3 < counts[0]  # one event per ~150 ms instead of one per 15 ms token
