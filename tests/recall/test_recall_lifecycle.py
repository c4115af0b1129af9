"""Recall's index goes with its thread, starts on threads older than it, and holds nothing a failed run added."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from chatbot.caller import CallerContext
from chatbot.db.locks import Locks
from chatbot.db.pool import connection_kwargs
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.ops.retention import purge_stale_threads
from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_containing
from tests.fixtures.models import ScriptedChatModel
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until
from tests.recall.conversation import ask, long_thread
from tests.recall.test_recall_scope import SMALL, thread_turn_rows

PLATE = "What was the other driver's plate?"


async def _indexed(client: object, thread: str, needle: str, url: str, **token: str) -> None:
    """Write a long thread whose turn 3 holds `needle`, and ask about it so recall indexes it."""
    await long_thread(client, thread, "en", 30, {3: f"The other driver's plate was {needle}."}, **token)  # type: ignore[arg-type]
    record = await ask(client, thread, PLATE, "en", **token)  # type: ignore[arg-type]
    assert any(needle in r["content"] for r in record["context"]["recalled"])
    assert "thread_turns" in rows_containing(url, needle)


async def whole_transcript(client: object, thread: str) -> list[tuple[str, str]]:
    """Return the thread's transcript, oldest first, read page by page through the API."""
    messages: list[tuple[str, str]] = []
    params: dict[str, object] = {"limit": 100}
    while True:
        page = (await client.get(f"/v1/threads/{thread}/messages", params=params, headers=auth())).json()  # type: ignore[attr-defined]
        messages = [(m["id"], m["content"]) for m in page["messages"]] + messages
        if not page["has_more"]:
            return messages
        params = {"limit": 100, "before": page["next_before"]}


async def test_delete_retention_and_erasure_leave_nothing_of_the_thread(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url, context_tokens=SMALL) as client:
        await _indexed(client, "kept-by-retention", "RT4410", url)
        cutoff = datetime.now(UTC) + timedelta(seconds=1)
        await wait_until(lambda: datetime.now(UTC) > cutoff, what="the clock to pass the cut-off")
        locks = Locks(url, connection_kwargs(settings_for(url)))
        try:
            report = await purge_stale_threads(services_of(client).pool, locks, cutoff)
        finally:
            await locks.close()
        assert report.deleted == 1
        assert rows_containing(url, "RT4410") == {}

        await _indexed(client, "deleted", "DL5520", url)
        assert (await client.delete("/v1/threads/deleted", headers=auth())).status_code == 204
        assert rows_containing(url, "DL5520") == {}

        erased = {"user_id": "u7"}
        await _indexed(client, "erased", "ER6630", url, **erased)
        assert (await client.delete("/v1/users/u7", headers=auth(**erased))).status_code == 200
        assert rows_containing(url, "ER6630") == {}


async def test_a_thread_written_before_recall_recalls_after_it(isolated_database_url: str) -> None:
    url = isolated_database_url
    # Written without recall: no index, as a thread from before the feature (50 turns: past the recent list).
    async with running_app(url, context_tokens=SMALL, agent_overrides={"recall": None}) as client:
        ids = await long_thread(client, "old", "en", 50, {3: "The other driver's plate was 52K913."})
    assert thread_turn_rows(url, "old") == []
    async with running_app(url, context_tokens=SMALL) as client:
        record = await ask(client, "old", PLATE, "en")
        transcript = await whole_transcript(client, "old")
    assert {"id": ids[3], "role": "user", "content": "The other driver's plate was 52K913."} in record["context"][
        "recalled"
    ]
    # Indexed from the transcript: every earlier message, in order, as the transcript has it.
    # 50 questions and answers, in order; not the running question nor its answer.
    assert thread_turn_rows(url, "old") == transcript[:100] and len(transcript) == 102


async def test_failed_and_cancelled_runs_add_nothing_of_their_own(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url, context_tokens=SMALL) as client:
        await _indexed(client, "t", "52K913", url)
    failing = ScriptedChatModel(mode="fail")
    async with running_app(url, context_tokens=SMALL, agent_overrides={"chat_model": failing}) as client:
        failed = await client.post(
            "/v1/threads/t/runs",
            json={"message": {"content": f"{PLATE} FAILQ-1"}},
            headers={"Accept": "application/json", **auth()},
        )
        assert failed.status_code != 200 or failed.json().get("status") != "answered"
        await _only_history(client, url, "FAILQ-1")
    async with running_app(url, context_tokens=SMALL, offline_token_delay_ms=40) as client:
        runs = services_of(client).runs
        listener = await runs.start(
            ThreadId("t"), CallerContext(TenantId("acme"), UserId("u1"), "en-US"), f"{PLATE} CANCELQ-2"
        )
        while (await asyncio.wait_for(listener.queue.get(), 10)).event != "token":
            pass
        cancel = await client.post(f"/v1/threads/t/runs/{listener.run_id}/cancel", headers=auth())
        assert cancel.status_code == 202
        while (await asyncio.wait_for(listener.queue.get(), 10)).event not in ("end", "error"):
            pass
        await runs.drain(5)
        record = (await client.get(f"/v1/threads/t/runs/{listener.run_id}", headers=auth())).json()
        assert record["status"] == "cancelled" and record["answer"]["complete"] is False
        await _only_history(client, url, "CANCELQ-2")
        assert record["answer"]["id"] not in dict(thread_turn_rows(url, "t"))  # nor the cut answer


async def _only_history(client: object, url: str, own: str) -> None:
    """Check the index holds transcript messages only, and not the question of the run that just ended."""
    transcript = dict(await whole_transcript(client, "t"))
    rows = thread_turn_rows(url, "t")
    assert rows and all(transcript.get(i) == content for i, content in rows)
    assert [c for c in transcript.values() if own in c]  # the run's question is in the transcript
    assert not [c for _, c in rows if own in c]  # but its run indexed only earlier turns
