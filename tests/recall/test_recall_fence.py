"""Recall writes under the thread's fence: a run that lost its lock indexes nothing; a next owner starts afresh.

A run's lock sessions end while it waits at its recall step; meanwhile another replica
deletes the thread, or erases its user. When the run goes on, its index write meets the
thread's fence and fails: nothing of the thread or of the user is left anywhere in the
database, and another tenant starting a thread under the same id is given none of it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from psycopg import sql

from chatbot.db.locks import Fence, LeaseLost
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.recall.service import IndexWriter, ThreadRecall
from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_containing
from tests.fixtures.lost_locks import HeldRecall, terminate_lock_sessions
from tests.fixtures.messages import send_for_answer, send_message
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until
from tests.recall.conversation import ask, long_thread
from tests.recall.test_recall_scope import SMALL, thread_turn_rows

SECRET = "QX7731ZR"
OTHER_TENANT = {"tenant": "next-owner", "user_id": "n1", "locale": "en-US"}


async def _sent(client: httpx.AsyncClient, thread: str, content: str, **token: str) -> int:
    return (await send_message(client, thread, content, **token)).status_code


async def _lose_the_lock_while_recalling(url: str, thread: str, gone: str) -> None:
    """Run a turn whose lock sessions end at its recall step while replica b deletes the thread or erases the user."""
    held = HeldRecall()
    async with (
        running_app(url, context_tokens=SMALL, agent_overrides={"recall": held}) as a,
        running_app(url, context_tokens=SMALL) as b,
    ):
        held.bind(a)
        # Short enough that the recent list is the whole thread, too long for the window: recall runs.
        for turn in range(9):
            await send_for_answer(a, thread, f"My policy code is {SECRET}-{turn}; claim number {turn}.")
        gate = held.hold(thread)
        run = asyncio.create_task(_sent(a, thread, "Which policy code did I give first?"))
        await asyncio.wait_for(gate.reached.wait(), 30)
        assert await terminate_lock_sessions(a, url) >= 1
        if gone == "deleted":
            await wait_until(
                lambda: _deleted(b, thread), what="the thread's lock to go with its session, and the delete"
            )
        else:
            erased = await wait_until(lambda: _erased(b), what="the user's runs to let go, and the erasure")
            assert erased is not None and erased.json()["threads_deleted"] == 1
        gate.release.set()
        assert await run == 200  # the stream started; it ends in an error event
        await services_of(a).runs.drain(10)


async def _deleted(client: httpx.AsyncClient, thread: str) -> bool:
    response = await client.delete(f"/v1/threads/{thread}", headers=auth())
    return response.status_code == 204


async def _erased(client: httpx.AsyncClient) -> httpx.Response | None:
    response = await client.delete("/v1/users/u1", headers=auth())
    return response if response.status_code == 200 else None


@pytest.mark.parametrize("gone", ["deleted", "erased"])
async def test_a_run_that_lost_its_lock_indexes_nothing_of_a_thread_gone_meanwhile(
    isolated_database_url: str, gone: str
) -> None:
    url = isolated_database_url
    thread = f"lost-{gone}-{uuid.uuid4().hex[:6]}"
    await _lose_the_lock_while_recalling(url, thread, gone)
    assert rows_containing(url, SECRET) == {}
    assert rows_containing(url, thread) == {}

    # Another tenant takes the thread id: its windows and records hold nothing of the first.
    async with running_app(url, context_tokens=SMALL) as client:
        for turn in range(12):
            end = await send_for_answer(client, thread, f"Which documents do I need for claim {turn}?", **OTHER_TENANT)
            record = await client.get(f"/v1/threads/{thread}/runs/{end['run_id']}", headers=auth(**OTHER_TENANT))
            context = record.json()["context"]
            assert not [r for r in context["recalled"] if SECRET in r["content"]]
            assert not [m for m in context["messages"] if SECRET in m["content"]]
    assert rows_containing(url, SECRET) == {}


async def test_an_index_write_after_the_lease_is_lost_raises_and_writes_nothing(migrated_database_url: str) -> None:
    url = migrated_database_url
    async with running_app(url) as client:
        pool: Pool = services_of(client).pool
        thread = f"fenced-{uuid.uuid4().hex[:6]}"
        await send_for_answer(client, thread, f"My policy code is {SECRET}.")
        stale = IndexWriter(
            TenantId("acme"), UserId("u1"), Fence(ThreadId(thread), str(uuid.uuid4()))
        )  # not the thread's token
        record = (await client.get(f"/v1/threads/{thread}/messages", headers=auth())).json()
        assert record["messages"]
        recall = ThreadRecall(pool)
        state = await services_of(client).runs.graph.aget_state({"configurable": {"thread_id": thread}})
        messages = state.values["messages"]
        async with pool.connection() as conn:
            with pytest.raises(LeaseLost):
                await recall.add_turns(conn, ThreadId(thread), messages, 0, writer=stale, held={})
        assert thread_turn_rows(url, thread) == []


async def test_a_new_owner_of_a_thread_id_starts_from_an_empty_index(isolated_database_url: str) -> None:
    url = isolated_database_url
    thread = "reused"
    async with running_app(url, context_tokens=SMALL) as client:
        # What a run that lost its lock left before recall's writes passed the fence: rows of
        # another tenant's thread under this id, with no checkpoint of it left.
        first = f"reused-first-{uuid.uuid4().hex[:6]}"
        await long_thread(client, first, "en", 20, {3: f"The other driver's plate was {SECRET}."})
        await ask(client, first, "What was the other driver's plate?", "en")
        async with services_of(client).pool.connection() as conn:
            for table in ("thread_turns", "thread_terms"):
                await _move_rows(conn, table, first, thread)
        ids = await long_thread(client, thread, "en", 20, {3: "The other driver's plate was 52K913."}, **OTHER_TENANT)
        record = await ask(client, thread, "What was the other driver's plate?", "en", **OTHER_TENANT)
        transcript = (
            await client.get(f"/v1/threads/{thread}/messages", params={"limit": 100}, headers=auth(**OTHER_TENANT))
        ).json()["messages"]
    recalled = record["context"]["recalled"]
    assert {"id": ids[3], "role": "user", "content": "The other driver's plate was 52K913."} in recalled
    assert not [r for r in recalled if SECRET in r["content"]]
    # The index is the new owner's thread from its first turn, and nothing of the old one.
    rows = thread_turn_rows(url, thread)
    assert rows == [(m["id"], m["content"]) for m in transcript][: len(rows)] and len(rows) >= 40


async def _move_rows(conn: Any, table: str, source: str, target: str) -> None:
    """Give `table`'s rows of thread `source` to thread `target`: copied, then deleted.

    Not an update of `thread_id`: on a Citus cluster that is the distribution column, whose
    value a row cannot change (the row would belong to another shard).
    """
    rows = await (
        await conn.execute(sql.SQL("select * from {} where thread_id = %s").format(sql.Identifier(table)), (source,))
    ).fetchall()
    for row in rows:
        values = {**row, "thread_id": target}
        insert = sql.SQL("insert into {} ({}) values ({})").format(
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, values)),
            sql.SQL(", ").join(sql.Placeholder() * len(values)),
        )
        await conn.execute(insert, list(values.values()))
    await conn.execute(sql.SQL("delete from {} where thread_id = %s").format(sql.Identifier(table)), (source,))
