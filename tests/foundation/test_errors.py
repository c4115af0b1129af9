"""Problem details everywhere, in the contract's order of checks."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr

from chatbot.config import Settings
from tests.fixtures.tokens import auth

RUNS = "/v1/threads/t-errors/runs"


async def test_oversized_body_gets_413_before_the_token_is_checked(client: httpx.AsyncClient) -> None:
    body = b'{"message": {"content": "' + b"x" * (70 * 1024) + b'"}}'
    response = await client.post(RUNS, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_bad_token_answers_401_before_a_malformed_body(client: httpx.AsyncClient) -> None:
    response = await client.post(RUNS, content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 401


@pytest.mark.parametrize(
    "body",
    [
        {"message": {"content": "   "}},
        {"message": {"content": "x" * 8001}},
        {"message": {"content": "hi"}, "tenant_id": "other"},
        {"message": {"content": "hi", "user_id": "other"}},
        {"message": "hi"},
        {},
    ],
    ids=["blank", "too long", "tenant_id in body", "user_id in body", "wrong shape", "empty"],
)
async def test_bad_bodies_get_422_problem_details(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    response = await client.post(RUNS, json=body, headers=auth())
    assert response.status_code == 422
    problem = response.json()
    assert problem["status"] == 422 and problem["title"] and problem["type"]
    assert "x" * 50 not in problem["detail"]  # the content sent is never echoed


@pytest.mark.parametrize("thread_id", ["-starts-with-dash", "has space", "a" * 129, "ünicode"])
async def test_bad_thread_ids_get_422(client: httpx.AsyncClient, thread_id: str) -> None:
    response = await client.post(f"/v1/threads/{thread_id}/runs", json={"message": {"content": "hi"}}, headers=auth())
    assert response.status_code == 422


async def test_unknown_route_is_a_problem_too(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/nothing-here", headers=auth())
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize("secret", [None, "short", "secret" * 1, "a" * 64])
def test_production_refuses_missing_or_weak_secrets(secret: str | None) -> None:
    with pytest.raises(ValueError, match="CHATBOT_SERVICE_SECRET"):
        Settings(environment="production", service_secret=None if secret is None else SecretStr(secret))


def test_dev_starts_without_a_secret() -> None:
    assert Settings(environment="dev").service_secret is None
