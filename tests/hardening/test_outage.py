"""With Postgres down every endpoint that needs it answers 503 fast; the replica recovers alone."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.fixtures.app import Replica, start_replica
from tests.fixtures.stoppable_postgres import StoppablePostgres
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until_sync

THREAD = "t-outage"
# The contract's bound: an answer within 3 seconds. The client gives up after it, so a
# replica that waits out a longer pool timeout fails the test with a timeout error.
CONTRACT_SECONDS = 3.0


def _endpoints(run_id: str) -> list[tuple[str, str, dict[str, object] | None, dict[str, str]]]:
    """Return (method, path, json body, extra headers) of every endpoint that needs Postgres."""
    return [
        ("POST", f"/v1/threads/{THREAD}/runs", {"message": {"content": "hello"}}, {"Accept": "application/json"}),
        ("POST", f"/v1/threads/{THREAD}/runs", {"message": {"content": "hello"}}, {"Accept": "text/event-stream"}),
        ("POST", "/v1/threads/t-outage-new/runs", {"message": {"content": "hi"}}, {"Accept": "application/json"}),
        ("GET", f"/v1/threads/{THREAD}/messages", None, {}),
        ("POST", f"/v1/threads/{THREAD}/runs/{run_id}/feedback", {"score": "up"}, {}),
        ("DELETE", f"/v1/threads/{THREAD}", None, {}),
        ("GET", "/v1/users/u1/memory", None, {}),
        ("DELETE", "/v1/users/u1/memory", None, {}),
        ("DELETE", "/v1/users/u1", None, {}),
    ]


@pytest.fixture
def replica(stoppable_postgres: StoppablePostgres) -> Iterator[Replica]:
    """Return a `chatbot serve` process on the stoppable server's database."""
    started = start_replica(stoppable_postgres.database_url)
    yield started
    started.kill()


def _call(
    base_url: str, method: str, path: str, body: dict[str, object] | None, headers: dict[str, str]
) -> httpx.Response:
    return httpx.request(method, base_url + path, json=body, headers={**auth(), **headers}, timeout=CONTRACT_SECONDS)


def _wait_ready(base_url: str, seconds: float = 30.0) -> None:
    def ready() -> bool:
        try:
            return httpx.get(base_url + "/readyz", timeout=CONTRACT_SECONDS).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until_sync(ready, what="the replica ready again after Postgres came back", timeout=seconds, interval=0.2)


def test_every_endpoint_answers_503_within_3s_during_an_outage_and_recovers(
    stoppable_postgres: StoppablePostgres, replica: Replica
) -> None:
    first = _call(
        replica.base_url,
        "POST",
        f"/v1/threads/{THREAD}/runs",
        {"message": {"content": "hi"}},
        {"Accept": "application/json"},
    )
    assert first.status_code == 200
    run_id = first.json()["run_id"]

    stoppable_postgres.stop()
    try:
        assert httpx.get(replica.base_url + "/healthz", timeout=CONTRACT_SECONDS).status_code == 200
        assert httpx.get(replica.base_url + "/readyz", timeout=CONTRACT_SECONDS).status_code == 503
        # Twice, every endpoint at once: the first pass meets connections that died with
        # the server, the second a pool with none left and reconnect attempts under way.
        for attempt in range(2):
            calls = _endpoints(run_id)
            with ThreadPoolExecutor(len(calls)) as executor:
                responses = list(executor.map(lambda c: _call(replica.base_url, *c), calls))
            for (method, path, _, headers), response in zip(calls, responses, strict=True):
                where = f"{method} {path} ({headers.get('Accept', '')}, pass {attempt + 1})"
                assert response.status_code == 503, where
                assert response.headers["content-type"].startswith("application/problem+json"), where
                assert int(response.headers["retry-after"]) >= 1, where
                assert response.json()["status"] == 503, where
    finally:
        stoppable_postgres.start()

    _wait_ready(replica.base_url)
    again = _call(
        replica.base_url,
        "POST",
        f"/v1/threads/{THREAD}/runs",
        {"message": {"content": "again"}},
        {"Accept": "application/json"},
    )
    assert again.status_code == 200
    page = _call(replica.base_url, "GET", f"/v1/threads/{THREAD}/messages", None, {})
    assert page.status_code == 200
    assert [m["content"] for m in page.json()["messages"] if m["role"] == "user"] == ["hi", "again"]
    assert _call(replica.base_url, "GET", "/v1/users/u1/memory", None, {}).status_code == 200
    assert _call(replica.base_url, "DELETE", f"/v1/threads/{THREAD}", None, {}).status_code == 204
