"""An erasure that answers 200 leaves nothing of the user, whatever they start while it runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from chatbot.ids import TenantId, UserId
from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_containing, rows_of_threads
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.sse import parse_blocks
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

USER = "u-erased"


def rejected(metrics_page: str, reason: str) -> float:
    """Return the runs-rejected counter of one reason from a /metrics page."""
    prefix = f'chatbot_runs_rejected_total{{reason="{reason}"}}'
    return sum(float(line.split()[-1]) for line in metrics_page.splitlines() if line.startswith(prefix))


async def test_a_run_sent_while_the_user_is_being_erased_is_refused_and_counted_as_such(
    isolated_database_url: str,
) -> None:
    headers = auth(user=USER, locale="en-US")
    async with running_app(isolated_database_url) as client:
        locks = services_of(client).locks
        before = await client.get("/metrics")
        # What an erasure holds while it deletes: the user's erasure key, exclusively.
        erasure = await locks.wait_erasure(TenantId("acme"), UserId(USER), 5)
        assert erasure is not None
        try:
            refused = await client.post(
                "/v1/threads/erase-c/runs", json={"message": {"content": "Hello"}}, headers=headers
            )
        finally:
            await erasure.release()
        assert refused.status_code == 409, refused.text
        assert "erased" in refused.json()["detail"]
        after = await client.get("/metrics")
        # Counted as an erasure refusal, not as a thread with a run in flight.
        assert rejected(after.text, "erasing") == rejected(before.text, "erasing") + 1
        assert rejected(after.text, "in_flight") == rejected(before.text, "in_flight")
        accepted = await client.post(
            "/v1/threads/erase-c/runs", json={"message": {"content": "Hello"}}, headers=headers
        )
        assert accepted.status_code == 200, accepted.text


async def test_a_run_started_on_a_new_thread_during_the_erasure_is_refused_or_erased(
    isolated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await load_demo_kb(isolated_database_url)
    # Minted here, not at import: a whole suite on a loaded machine outlives a 5-minute token.
    headers = auth(user=USER, locale="en-US")
    async with running_app(isolated_database_url, offline_token_delay_ms=40) as client:
        locks = services_of(client).locks
        erasing = asyncio.Event()
        wait_erasure = locks.wait_erasure

        async def erasure_started(*args: Any, **kwargs: Any) -> Any:
            erasing.set()  # the erasure is waiting for the user's runs in flight
            return await wait_erasure(*args, **kwargs)

        monkeypatch.setattr(locks, "wait_erasure", erasure_started)
        # `runs.in_flight` counts a run still on its way to the lock too: wait for the lock itself,
        # or an erasure that gets there first refuses the first run (409) on a loaded machine.
        locked = asyncio.Event()
        try_run = locks.try_run

        async def run_locked(*args: Any, **kwargs: Any) -> Any:
            lease = await try_run(*args, **kwargs)
            if lease is not None:
                locked.set()
            return lease

        monkeypatch.setattr(locks, "try_run", run_locked)
        first = asyncio.create_task(
            client.post(
                "/v1/threads/erase-a/runs",
                json={"message": {"content": "What does travel insurance cover for medical costs?"}},
                headers=headers,
            )
        )
        await wait_until(lambda: locked.is_set() or first.done(), what="the first run holding its thread lock")
        assert not first.done(), (await first).text  # the first run must still be in flight
        erasure = asyncio.create_task(client.delete(f"/v1/users/{USER}", headers=headers))
        await asyncio.wait_for(erasing.wait(), 30)  # the erasure is under way, waiting for the first run
        second = await client.post(
            "/v1/threads/erase-b/runs",
            json={"message": {"content": "Remember that I drive a blue Peugeot 206 to work."}},
            headers=headers,
        )
        assert second.status_code in (200, 409), second.text
        if second.status_code == 200:
            assert parse_blocks(second.text)[0][-1].event == "end"
        erased = await erasure
        assert (await first).status_code == 200
        assert erased.status_code == 200, erased.text
        await services_of(client).memory.drain(30)  # memory work of both runs
        for thread in ("erase-a", "erase-b"):
            page = await client.get(f"/v1/threads/{thread}/messages", headers=headers)
            assert page.status_code == 404, (thread, page.text)
    # No table (as the catalogue lists them) keeps a row of the user or of their threads.
    assert rows_containing(isolated_database_url, USER) == {}
    assert set(rows_of_threads(isolated_database_url, ["erase-a", "erase-b"]).values()) == {0}
