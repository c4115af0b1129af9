"""Hostile input gets the contract's 4xx, never a 500, and nothing is stored altered."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import psycopg
import pytest

from chatbot.json_body import StrictJsonRoute
from tests.fixtures.app import api_routes
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


_MESSAGE = '{"message": {"content": "hello"}}'


@pytest.mark.parametrize(
    ("raw", "content_type"),
    [
        (_MESSAGE.encode("utf-16"), "application/json"),  # with its byte-order mark
        (_MESSAGE.encode("utf-16-le"), "application/json; charset=utf-8"),  # no BOM, mislabelled
        (_MESSAGE.encode("utf-16-be"), "application/json; charset=utf-16"),  # labelled as what it is
        (_MESSAGE.encode("utf-32"), "application/json"),
        (_MESSAGE.encode("utf-32-le"), "application/json; charset=utf-8"),
        (b'{"message": {"content": "first"}, "message": {"content": "second"}}', "application/json"),
        (b'{"message": {"content": "first", "content": "second"}}', "application/json"),
        (b'{"message": {"content": "hello"}, "message": {"content": "hello"}}', "application/json"),
        (b'{"message": {"content": "hello"}, "x": NaN}', "application/json"),
    ],
    ids=[
        "utf-16 with bom",
        "utf-16-le labelled utf-8",
        "utf-16-be labelled utf-16",
        "utf-32 with bom",
        "utf-32-le labelled utf-8",
        "repeated top-level key",
        "repeated nested key",
        "repeated key with the same value",
        "NaN",
    ],
)
async def test_bodies_in_other_encodings_or_with_repeated_keys_get_422_and_nothing_is_stored(
    client: httpx.AsyncClient, raw: bytes, content_type: str
) -> None:
    # Each used to be read (json.loads guesses UTF-16/32; the last repeated key wins) and stored.
    thread = f"t-strict-{abs(hash((raw, content_type)))}"
    response = await client.post(
        _runs(thread), content=raw, headers={"Content-Type": content_type, "Accept": "application/json", **auth()}
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "first" not in response.text and "second" not in response.text  # no text of the body echoed
    assert (await client.get(f"/v1/threads/{thread}/messages", headers=auth())).status_code == 404


async def test_a_utf8_body_with_a_byte_order_mark_is_read_as_usual(client: httpx.AsyncClient) -> None:
    # RFC 8259 lets a parser ignore a leading BOM; the text after it is stored as sent.
    raw = b"\xef\xbb\xbf" + '{"message": {"content": "سلام \U0001f600"}}'.encode()
    response = await client.post(_runs("t-bom"), content=raw, headers={**JSON, **auth(), "Accept": "application/json"})
    assert response.status_code == 200
    messages = (await client.get("/v1/threads/t-bom/messages", headers=auth())).json()["messages"]
    assert messages[0]["content"] == "سلام \U0001f600"


async def test_feedback_with_a_repeated_score_is_refused_and_the_earlier_rating_stays(
    client: httpx.AsyncClient, migrated_database_url: str
) -> None:
    thread = "t-feedback-repeat"
    run = await client.post(
        _runs(thread), json={"message": {"content": "hello"}}, headers={**auth(), "Accept": "application/json"}
    )
    feedback = f"/v1/threads/{thread}/runs/{run.json()['run_id']}/feedback"
    assert (await client.post(feedback, json={"score": "down"}, headers=auth())).status_code == 204
    repeated = b'{"score": "down", "score": "up"}'
    assert (await client.post(feedback, content=repeated, headers={**JSON, **auth()})).status_code == 422
    utf16 = '{"score": "up"}'.encode("utf-16")
    assert (await client.post(feedback, content=utf16, headers={**JSON, **auth()})).status_code == 422
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
        cur = await conn.execute("select score from run_feedback where thread_id = %s", (thread,))
        assert await cur.fetchall() == [("down",)]


async def test_every_route_with_a_json_body_reads_it_strictly(client: httpx.AsyncClient) -> None:
    # A new endpoint with a body on a router without the strict route class would be lenient again.
    routes = api_routes(client.app.routes)  # type: ignore[attr-defined]
    body_routes = [r for r in routes if r.body_field is not None]
    assert body_routes and all(isinstance(r, StrictJsonRoute) for r in body_routes), [r.path for r in body_routes]
