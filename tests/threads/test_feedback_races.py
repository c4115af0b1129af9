"""Feedback racing the thread's deletion or its user's erasure never leaves a row behind.

The feedback is written in a transaction that holds the thread's rows key shared and
checks the run there; a deletion holds that key exclusively (db/locks.py): whichever
comes first, no rating of a deleted thread or an erased user is left.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from psycopg import AsyncConnection

from chatbot.db.pool import Pool
from chatbot.threads import queries
from tests.fixtures.app import running_app, services_of
from tests.fixtures.messages import send_for_answer
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until


async def feedback_rows(pool: Pool, thread: str, user: str) -> int:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "select count(*) as n from run_feedback where thread_id = %s or user_id = %s", (thread, user)
            )
        ).fetchone()
    assert row is not None
    return int(row["n"])


async def a_session_waits_for_a_lock(conn: AsyncConnection[Any]) -> bool:
    """Tell whether another session of this database waits for a lock (the rows the rating holds)."""
    cur = await conn.execute(
        "select count(*) as n from pg_locks where not granted "
        "and database = (select oid from pg_database where datname = current_database())"
    )
    row = await cur.fetchone()
    assert row is not None
    return bool(row["n"])


async def race(
    client: httpx.AsyncClient, thread: str, run_id: str, delete: str, user: str, writing: asyncio.Event
) -> int:
    """Rate the run and, once the rating has passed its checks, delete (or erase) while it writes."""
    headers = auth(user=user, locale="en-US")
    rate = client.post(
        f"/v1/threads/{thread}/runs/{run_id}/feedback", json={"score": "down", "comment": "wrong"}, headers=headers
    )

    async def once_checked() -> httpx.Response:
        await asyncio.wait_for(writing.wait(), 10)
        return await client.delete(delete, headers=headers)

    writing.clear()
    rated, deleted = await asyncio.gather(rate, once_checked())
    assert rated.status_code in (204, 404), rated.text
    assert deleted.status_code in (200, 204), deleted.text
    return rated.status_code


@pytest.fixture
async def slow_feedback_write(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """A replica that pauses between the rating's checks and its write (a slow machine, a GC pause)."""
    real = queries.upsert_feedback
    writing = asyncio.Event()  # set once a rating has passed its checks and is about to write

    async def slow(conn: AsyncConnection[Any], params: tuple[Any, ...]) -> None:
        writing.set()
        # The pause is the behaviour under test: it lasts until the deletion (or the erasure)
        # has come and waits for the rows this transaction holds.
        await wait_until(lambda: a_session_waits_for_a_lock(conn), what="the deletion to wait for the rating")
        await real(conn, params)

    monkeypatch.setattr(queries, "upsert_feedback", slow)
    return writing


@pytest.mark.parametrize("what", ["thread", "user"])
async def test_feedback_racing_a_delete_or_an_erasure_leaves_nothing(
    migrated_database_url: str, what: str, slow_feedback_write: asyncio.Event
) -> None:
    async with running_app(migrated_database_url) as client:
        pool = services_of(client).pool
        for turn in range(3):
            user = f"rater-{what}-{turn}"
            thread = f"rated-{what}-{turn}"
            run_id = (await send_for_answer(client, thread, "What does travel insurance cover?", user=user))["run_id"]
            target = f"/v1/threads/{thread}" if what == "thread" else f"/v1/users/{user}"
            status = await race(client, thread, run_id, target, user, slow_feedback_write)
            assert await feedback_rows(pool, thread, user) == 0, (turn, status)
