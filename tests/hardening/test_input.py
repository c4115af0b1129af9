"""Hostile input gets the contract's 4xx, never a 500, and nothing is stored altered."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.fixtures.tokens import auth

JSON = {"Content-Type": "application/json"}


def _runs(thread_id: str) -> str:
    return f"/v1/threads/{thread_id}/runs"


async def _chunks(total: int, size: int = 4096) -> AsyncIterator[bytes]:
    yield b'{"message": {"content": "'
    sent = 0
    while sent < total:
        yield b"x" * size
        sent += size
    yield b'"}}'


@pytest.mark.parametrize(
    "raw",
    [
        b'{"message": {"content": "before\\u0000after"}}',
        b'{"message": {"content": "lone \\ud800 high surrogate"}}',
        b'{"message": {"content": "lone \\udc00 low surrogate"}}',
        b'{"message": {"content": "reversed pair \\udc00\\ud800"}}',
    ],
    ids=["nul", "lone high surrogate", "lone low surrogate", "reversed pair"],
)
async def test_unstorable_text_is_refused_and_nothing_is_stored(client: httpx.AsyncClient, raw: bytes) -> None:
    thread = "t-unstorable"
    response = await client.post(_runs(thread), content=raw, headers={**JSON, **auth()})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    # Refused, not stored some other way: the thread was never created.
    assert (await client.get(f"/v1/threads/{thread}/messages", headers=auth())).status_code == 404


async def test_a_surrogate_pair_is_one_character_and_is_stored_as_sent(client: httpx.AsyncClient) -> None:
    thread = "t-pair"
    raw = b'{"message": {"content": "hello \\ud83d\\ude00"}}'
    response = await client.post(_runs(thread), content=raw, headers={**JSON, **auth(), "Accept": "application/json"})
    assert response.status_code == 200
    messages = (await client.get(f"/v1/threads/{thread}/messages", headers=auth())).json()["messages"]
    assert messages[0]["content"] == "hello \U0001f600"


@pytest.mark.parametrize(
    "comment",
    ["\\u0000", "a\\ud800", "\\udfff"],
    ids=["nul", "lone high surrogate", "lone low surrogate"],
)
async def test_feedback_comments_with_unstorable_text_are_refused(client: httpx.AsyncClient, comment: str) -> None:
    thread = "t-feedback-text"
    run = await client.post(
        _runs(thread), json={"message": {"content": "hello"}}, headers={**auth(), "Accept": "application/json"}
    )
    run_id = run.json()["run_id"]
    raw = b'{"score": "up", "comment": "' + comment.encode() + b'"}'
    response = await client.post(
        f"/v1/threads/{thread}/runs/{run_id}/feedback", content=raw, headers={**JSON, **auth()}
    )
    assert response.status_code == 422
    fine = await client.post(
        f"/v1/threads/{thread}/runs/{run_id}/feedback", json={"score": "up", "comment": "ok"}, headers=auth()
    )
    assert fine.status_code == 204


async def test_a_chunked_body_over_the_limit_gets_413(client: httpx.AsyncClient) -> None:
    response = await client.post(_runs("t-chunked"), content=_chunks(70 * 1024), headers={**JSON, **auth()})
    assert response.status_code == 413
    assert response.json()["status"] == 413


async def test_a_chunked_body_over_the_limit_gets_413_before_a_bad_token(client: httpx.AsyncClient) -> None:
    response = await client.post(_runs("t-chunked"), content=_chunks(70 * 1024), headers=JSON)
    assert response.status_code == 413


async def test_a_chunked_body_under_the_limit_is_read_as_usual(client: httpx.AsyncClient) -> None:
    response = await client.post(
        _runs("t-chunked-ok"), content=_chunks(8 * 1024), headers={**JSON, **auth(), "Accept": "application/json"}
    )
    # 8 KiB of "x" is over the 8000-character limit: a shape error, so the body was read whole.
    assert response.status_code == 422
    small = await client.post(
        _runs("t-chunked-ok"), content=_chunks(4096, 1024), headers={**JSON, **auth(), "Accept": "application/json"}
    )
    assert small.status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b'{"message": {"content": "caf\xe9"}}',  # Latin-1, not UTF-8
        b'{"message": {"content": "\xed\xa0\x80"}}',  # a surrogate encoded as UTF-8
        b"\xff\xfe\x00",
        b'{"message": {"content": "hi"',
        b"{not json",
        b'{"message": {"content": "hi"}} trailing',
        b"[" * 20000 + b"]" * 20000,  # nested past the decoder's recursion limit
        b'{"message": {"content": "hi"}, "n": ' + b"9" * 5000 + b"}",  # past int() digit limit
        b"",
        b"null",
        b'"just a string"',
    ],
    ids=[
        "latin-1",
        "utf-8 surrogate",
        "binary",
        "truncated",
        "not json",
        "trailing garbage",
        "deep nesting",
        "huge number",
        "empty",
        "null",
        "string",
    ],
)
async def test_bodies_that_are_not_utf8_json_objects_get_422(client: httpx.AsyncClient, raw: bytes) -> None:
    response = await client.post(_runs("t-bad-json"), content=raw, headers={**JSON, **auth()})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_bad_json_without_a_content_type_is_a_422_too(client: httpx.AsyncClient) -> None:
    response = await client.post(_runs("t-bad-json"), content=b"\xff{", headers=auth())
    assert response.status_code == 422
