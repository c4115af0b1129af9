"""Every path parameter of every route, given text no id can be: a 4xx problem, never a 500.

`DELETE …/memory/facts/%00` once answered 500 and reset the connection (a fact id reached
Postgres with U+0000 in it). Each route with a `{...}` in its path is tried with hostile
text in one parameter and valid values in the others; a route added later is held to it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fixtures.app import api_routes
from tests.fixtures.messages import send_for_answer
from tests.fixtures.tokens import auth

THREAD = "t-path-ids"
HOSTILE = {
    "U+0000": "%00",
    "U+0000 inside": "abc%00def",
    "a lone surrogate (invalid UTF-8)": "%ED%A0%80",
    "invalid UTF-8": "%FF%FE",
    "U+2028": "%E2%80%A8",
    "a dot segment": "..%2e",
    "an encoded slash": "a%2Fb",
    "a backslash": "a%5Cb",
    "5,000 characters": "a" * 5000,
    "a newline": "a%0Ab",
    "a space": "%20",
}


@pytest.fixture
async def valid(client: httpx.AsyncClient) -> dict[str, str]:
    run_id = str((await send_for_answer(client, THREAD, "Please remember that I live in Shiraz."))["run_id"])
    return {"thread_id": THREAD, "run_id": run_id, "user_id": "u1", "fact_id": "0" * 32}


def _routes(client: httpx.AsyncClient) -> list[tuple[str, str, str]]:
    found = [
        (method, route.path, name)
        for route in api_routes(client.app.routes)  # type: ignore[attr-defined]
        for name in route.param_convertors
        for method in sorted(route.methods or ())
    ]
    assert {name for _, _, name in found} == {"thread_id", "run_id", "user_id", "fact_id"}, found
    return found


def _body(path: str) -> dict[str, Any] | None:
    if path.endswith("/feedback"):
        return {"score": "up"}
    if path.endswith("/runs"):
        return {"message": {"content": "hello"}}
    return None


async def test_hostile_text_in_any_path_parameter_is_a_4xx_problem(
    client: httpx.AsyncClient, valid: dict[str, str]
) -> None:
    answers: dict[tuple[str, str, str, str], int] = {}
    for method, path, name in _routes(client):
        for label, text in HOSTILE.items():
            url = path
            for param, value in {**valid, name: text}.items():
                url = url.replace("{" + param + "}", value)
            response = await client.request(
                method, url, json=_body(path), headers={"Accept": "application/json", **auth(locale="en-US")}
            )
            answers[(method, path, name, label)] = response.status_code
            assert 400 <= response.status_code < 500, (method, path, name, label, response.text[:300])
            assert response.headers["content-type"].startswith("application/problem+json"), (method, path, label)
    # A fact id that cannot be one is a missing fact: 404, as for a well-formed unknown id.
    facts = {label: code for (_, path, name, label), code in answers.items() if name == "fact_id"}
    assert set(facts.values()) == {404}, facts
