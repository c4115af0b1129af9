"""One run-id type for every endpoint that takes a run id: anything that is not a run of the thread is 404.

An overlong id ("-" * 32 + 32 hex digits + "junk") used to be 404 on the record (cut to 64
characters first) but 422 on the stream and the feedback. Every route with `{run_id}` in its
path is tried, so an endpoint added later (cancel) is held to the same answer.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.fixtures.app import api_routes
from tests.fixtures.messages import send_for_answer
from tests.fixtures.tokens import auth

THREAD = "t-run-ids"


def _run_routes(client: httpx.AsyncClient) -> list[tuple[str, str]]:
    found = [
        (method, route.path)
        for route in api_routes(client.app.routes)  # type: ignore[attr-defined]
        if "{run_id}" in route.path
        for method in sorted(route.methods or ())
    ]
    assert {path.rsplit("}", 1)[-1] for _, path in found} >= {"", "/stream", "/feedback"}, found
    return found


async def _call(client: httpx.AsyncClient, method: str, path: str, thread: str, run_id: str, **token: Any) -> int:
    url = path.replace("{thread_id}", thread).replace("{run_id}", run_id)
    body = {"score": "up"} if path.endswith("/feedback") else None
    response = await client.request(method, url, json=body, headers=auth(**token))
    if response.status_code == 404:
        assert response.headers["content-type"].startswith("application/problem+json")
    return response.status_code


@pytest.fixture
async def run_id(client: httpx.AsyncClient) -> str:
    return str((await send_for_answer(client, THREAD, "hello"))["run_id"])


def _not_run_ids(run_id: str) -> dict[str, str]:
    digits = run_id.replace("-", "")
    return {
        "overlong: dashes, hex, junk": "-" * 32 + uuid.uuid4().hex + "junk",
        "the run's hex after 32 dashes": "-" * 32 + digits,
        "the run's id plus junk": run_id + "junk",
        "the run's id plus 100 zeros": run_id + "0" * 100,
        "the run's hex without dashes": digits,
        "the run's id in braces": "{" + run_id + "}",
        "the run's id as a URN": "urn:uuid:" + run_id,
        "not a uuid": "not-a-uuid",
        "5,000 characters": "a" * 5000,
        "another run id": str(uuid.uuid4()),
    }


async def test_every_run_endpoint_answers_404_for_what_is_not_a_run_of_the_thread(
    client: httpx.AsyncClient, run_id: str
) -> None:
    routes = _run_routes(client)
    for method, path in routes:
        for name, bad in _not_run_ids(run_id).items():
            status = await _call(client, method, path, THREAD, bad)
            assert status == 404, (method, path, name, status)


async def test_the_run_id_as_given_and_in_upper_case_names_the_run(client: httpx.AsyncClient, run_id: str) -> None:
    for spelling in (run_id, run_id.upper()):
        record = await client.get(f"/v1/threads/{THREAD}/runs/{spelling}", headers=auth())
        assert record.status_code == 200 and record.json()["run_id"] == run_id
        stream = await client.get(f"/v1/threads/{THREAD}/runs/{spelling}/stream", headers=auth())
        assert stream.status_code == 200 and f"id: {run_id}:" in stream.text
        feedback = await client.post(
            f"/v1/threads/{THREAD}/runs/{spelling}/feedback", json={"score": "down"}, headers=auth()
        )
        assert feedback.status_code == 204


async def test_a_malformed_run_id_does_not_answer_before_the_request_shape_or_the_thread(
    client: httpx.AsyncClient, run_id: str
) -> None:
    overlong = "-" * 32 + uuid.uuid4().hex + "junk"
    # 422 (request shape) ranks above 404: a bad thread id or body still answers 422.
    for method, path in _run_routes(client):
        assert await _call(client, method, path, "bad thread id!", overlong) == 422, (method, path)
    bad_body = await client.post(
        f"/v1/threads/{THREAD}/runs/{overlong}/feedback", json={"score": "meh"}, headers=auth()
    )
    assert bad_body.status_code == 422
    # Another caller's thread: 404 whatever the run id, as for a thread that does not exist.
    for method, path in _run_routes(client):
        for bad in (overlong, run_id):
            assert await _call(client, method, path, THREAD, bad, tenant="other-tenant") == 404
