"""Recall rows of a thread whose checkpoints are gone are still found: by the owner's DELETE, erasure and retention.

Such rows were left by a run that wrote its index after losing its thread lock (before the
index writes passed the thread's fence). They name the thread and the owner they were
indexed for, so nothing of the thread or of its user outlives a deletion.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import httpx
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from chatbot.db.locks import Locks
from chatbot.db.pool import connection_kwargs
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.ops.retention import purge_stale_threads
from chatbot.recall.service import IndexWriter, ThreadRecall
from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_containing
from tests.fixtures.messages import send_for_answer
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import auth
from tests.recall.test_recall_scope import thread_turn_rows


def _said(secret: str) -> list[BaseMessage]:
    return [
        HumanMessage(content=f"My policy code is {secret}.", id=str(uuid.uuid4())),
        AIMessage(content="Noted.", id=str(uuid.uuid4())),
    ]


async def _left(client: httpx.AsyncClient, thread: str, secret: str) -> None:
    """Leave recall rows of `thread`, indexed for acme's u1, with no checkpoint of the thread (or under another's)."""
    pool = services_of(client).pool
    async with pool.connection() as conn:
        await ThreadRecall(pool).add_turns(
            conn, ThreadId(thread), _said(secret), 0, writer=IndexWriter(TenantId("acme"), UserId("u1"), None)
        )


async def test_the_owners_delete_finds_recall_rows_without_checkpoints(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url) as client:
        await _left(client, "left-deleted", "LD4471")
        assert len(thread_turn_rows(url, "left-deleted")) == 2
        # Another user's DELETE is a 204 that deletes nothing, as for any thread not theirs.
        assert (await client.delete("/v1/threads/left-deleted", headers=auth(user_id="u2"))).status_code == 204
        assert "thread_turns" in rows_containing(url, "LD4471")
        assert (await client.delete("/v1/threads/left-deleted", headers=auth())).status_code == 204
    assert rows_containing(url, "LD4471") == {}
    assert rows_containing(url, "left-deleted") == {}


async def test_erasure_finds_the_users_recall_rows_wherever_they_are(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url) as client:
        await _left(client, "left-erased", "LE5582")
        # A thread id given again to another tenant after the user's thread went, its old rows left under it.
        await send_for_answer(client, "given-again", "Which documents do I need for a claim?", tenant="other")
        await _left(client, "given-again", "LE6693")
        erased = await client.delete("/v1/users/u1", headers=auth())
        assert erased.status_code == 200 and erased.json()["threads_deleted"] == 1
        # The other tenant's thread stays; only the erased user's rows under its id went.
        messages = await client.get("/v1/threads/given-again/messages", headers=auth(tenant="other"))
        assert messages.status_code == 200 and len(messages.json()["messages"]) == 2
    assert rows_containing(url, "LE5582") == {} and rows_containing(url, "LE6693") == {}
    assert rows_containing(url, "left-erased") == {}


async def test_retention_deletes_recall_rows_of_a_thread_without_checkpoints(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url) as client:
        await _left(client, "left-retained", "LR7704")
        await send_for_answer(client, "recent", "Which documents do I need for a claim?")
        locks = Locks(url, connection_kwargs(settings_for(url)))
        try:
            # A cut-off far in the past: no thread with checkpoints is stale, the one without any goes.
            report = await purge_stale_threads(services_of(client).pool, locks, datetime(2000, 1, 1, tzinfo=UTC))
        finally:
            await locks.close()
        assert report.deleted == 1
        assert (await client.get("/v1/threads/recent/messages", headers=auth())).status_code == 200
    assert rows_containing(url, "LR7704") == {} and rows_containing(url, "left-retained") == {}
