"""Cancelling a run across real replicas (`chatbot serve` processes) with the provider wire double.

Two replicas share a database and a provider double; a run streams a long answer from
replica A, slowly, and the cancel is sent to A itself or to B. Every stream of the run ends
with the `cancelled` error, the double sees its connection closed before the answer's end,
the thread takes the next message, and the record keeps the shown text.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.app import Replica, start_replica
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.sse import Event, events_of
from tests.fixtures.tokens import auth

EN = {"locale": "en-US"}
LONG = "The policy covers medical costs abroad up to the limit in your schedule. " * 30
PIECES = len(LONG) // 4
REMEMBER = "Please remember that my car is a 2019 Toyota Corolla."


@pytest.fixture(scope="module")
def double() -> Iterator[ProviderDouble]:
    with ProviderDouble() as d:
        yield d


@pytest.fixture(scope="module")
def pair(migrated_database_url: str, double: ProviderDouble) -> Iterator[tuple[Replica, Replica]]:
    env = {
        "CHATBOT_MODEL": "openai:gpt-4o-mini",
        "CHATBOT_MODEL_BASE_URL": double.openai_base_url,
        "OPENAI_API_KEY": "test-key",
    }
    a = start_replica(migrated_database_url, **env)
    try:
        b = start_replica(migrated_database_url, **env)
    except BaseException:
        a.kill(signal.SIGTERM)
        raise
    yield a, b
    for replica in (a, b):
        replica.kill(signal.SIGTERM)


async def stream_until(response: httpx.Response, stop: str) -> tuple[list[Event], Any]:
    """Read events until one named `stop` arrives; return them and the iterator (for the rest)."""
    events: list[Event] = []
    iterator = events_of(response).__aiter__()
    while not events or events[-1].event != stop:
        events.append(await iterator.__anext__())
    return events, iterator


async def to_the_end(iterator: Any) -> list[Event]:
    return [event async for event in iterator]


@pytest.mark.parametrize("where", ["same", "other"])
async def test_a_cancel_from_either_replica_stops_the_model_and_ends_every_stream(
    pair: tuple[Replica, Replica], double: ProviderDouble, where: str
) -> None:
    a, b = pair
    canceller = a if where == "same" else b
    thread = f"replicas-{where}"
    double.reset()
    double.script("gpt-4o-mini", Behaviour(answer=LONG, piece_delay=0.03))
    headers = auth(**EN)
    async with httpx.AsyncClient(timeout=30) as http:
        body = {"message": {"content": REMEMBER}}
        async with http.stream("POST", f"{a.base_url}/v1/threads/{thread}/runs", json=body, headers=headers) as run:
            assert run.status_code == 200
            seen, rest = await stream_until(run, "token")
            run_id = seen[0].data["run_id"]
            # A rejoin through the other replica follows the run from there.
            async with http.stream(
                "GET", f"{b.base_url}/v1/threads/{thread}/runs/{run_id}/stream", headers=headers
            ) as rejoin:
                _, rejoin_rest = await stream_until(rejoin, "metadata")
                cancelled = await http.post(f"{canceller.base_url}/v1/threads/{thread}/runs/{run_id}/cancel",
                                            headers=headers)  # fmt: skip
                assert cancelled.status_code == 202, cancelled.text
                # The thread is free: the next message is accepted (on either replica).
                follow_up = await http.post(
                    f"{b.base_url}/v1/threads/{thread}/runs",
                    json={"message": {"content": "And what about luggage?"}},
                    headers={"Accept": "application/json", **headers},
                )
                assert follow_up.status_code == 200, follow_up.text
                seen += await to_the_end(rest)
                rejoined = await to_the_end(rejoin_rest)
        for events in (seen, rejoined):
            assert [e.event for e in events].count("error") == 1 and events[-1].event == "error"
            assert events[-1].data["status"] == 409 and events[-1].data["reason"] == "cancelled"
            assert "end" not in [e.event for e in events]
        shown = "".join(e.data["content"] for e in seen if e.event == "token")

        # The model call was stopped: the double saw the client leave before the answer's end.
        assert await double.async_wait_for(lambda d: bool(d.disconnected))
        first = double.requests[0]
        assert first.disconnected and not first.completed and first.pieces_sent < PIECES

        record = (await http.get(f"{b.base_url}/v1/threads/{thread}/runs/{run_id}", headers=headers)).json()
        assert record["status"] == "cancelled"
        assert record["answer"]["content"] == shown and record["answer"]["complete"] is False
        replay = await http.get(f"{a.base_url}/v1/threads/{thread}/runs/{run_id}/stream", headers=headers)
        assert '"reason": "cancelled"' in replay.text or '"reason":"cancelled"' in replay.text
        again = await http.post(f"{b.base_url}/v1/threads/{thread}/runs/{run_id}/cancel", headers=headers)
        assert again.status_code == 409
        memory = (await http.get(f"{a.base_url}/v1/users/u1/memory", headers=headers)).json()
        assert not any("Corolla" in fact["text"] for fact in memory["facts"])
