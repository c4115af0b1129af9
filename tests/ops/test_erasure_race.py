"""An erasure that answers 200 leaves nothing of the user, whatever they start while it runs."""

from __future__ import annotations

import asyncio

from tests.fixtures.app import running_app
from tests.fixtures.catalogue import rows_containing, rows_of_threads
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.sse import parse_blocks
from tests.fixtures.tokens import auth

USER = "u-erased"


async def test_a_run_started_on_a_new_thread_during_the_erasure_is_refused_or_erased(
    isolated_database_url: str,
) -> None:
    await load_demo_kb(isolated_database_url)
    # Minted here, not at import: a whole suite on a loaded machine outlives a 5-minute token.
    headers = auth(user=USER, locale="en-US")
    async with running_app(isolated_database_url, offline_token_delay_ms=40) as client:
        runs = client.app.state.runs  # type: ignore[attr-defined]
        first = asyncio.create_task(
            client.post(
                "/v1/threads/erase-a/runs",
                json={"message": {"content": "What does travel insurance cover for medical costs?"}},
                headers=headers,
            )
        )
        while runs.in_flight == 0 and not first.done():  # noqa: ASYNC110 - waiting for the run to be admitted
            await asyncio.sleep(0.01)
        assert not first.done(), (await first).text  # the first run must still be in flight
        erasure = asyncio.create_task(client.delete(f"/v1/users/{USER}", headers=headers))
        await asyncio.sleep(0.3)  # the erasure is under way, waiting for the first run
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
        await asyncio.sleep(2.5)  # memory work is written within about two seconds of an answer
        for thread in ("erase-a", "erase-b"):
            page = await client.get(f"/v1/threads/{thread}/messages", headers=headers)
            assert page.status_code == 404, (thread, page.text)
    # No table (as the catalogue lists them) keeps a row of the user or of their threads.
    assert rows_containing(isolated_database_url, USER) == {}
    assert set(rows_of_threads(isolated_database_url, ["erase-a", "erase-b"]).values()) == {0}
