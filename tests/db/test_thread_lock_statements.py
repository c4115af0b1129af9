"""The thread lock and the rate counter as the Citus placement needs them.

A run's lock is one statement (a function on the coordinator): the owner checked first, the
lock taken, and the fence token set only when it was granted; a token that cannot be set
gives the lock back. The rate counter deletes the user's older windows with
a statement of its own when a new window opens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.rows import dict_row

from chatbot.caller import CallerContext
from chatbot.db.langgraph_threads import first_checkpoint_owner
from chatbot.db.locks import Locks, OwnedByAnother
from chatbot.db.pool import Pool, connection_kwargs
from chatbot.db.saver import PooledPostgresSaver
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.threads.ratelimit import RateLimiter
from tests.fixtures.postgres import settings_for


@pytest.fixture
async def two_replicas(isolated_database_url: str) -> AsyncIterator[tuple[Locks, Locks]]:
    kwargs = connection_kwargs(settings_for(isolated_database_url))
    first, second = Locks(isolated_database_url, kwargs), Locks(isolated_database_url, kwargs)
    await first.open()
    await second.open()
    yield first, second
    await first.close()
    await second.close()


def _token(url: str, thread: str) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("select token::text from thread_fences where thread_id = %s", (thread,)).fetchone()
    return None if row is None else str(row[0])


async def test_a_granted_lock_sets_the_fence_and_a_refused_one_leaves_it(
    two_replicas: tuple[Locks, Locks], isolated_database_url: str
) -> None:
    first, second = two_replicas
    lease = await first.try_run(ThreadId("t-lock"), TenantId("acme"), UserId("u1"))
    assert lease is not None and lease.fence is not None
    assert _token(isolated_database_url, "t-lock") == lease.fence.token
    assert await second.try_run(ThreadId("t-lock"), TenantId("acme"), UserId("u1")) is None  # busy: 409
    assert _token(isolated_database_url, "t-lock") == lease.fence.token  # the holder's token stands
    await lease.release()
    again = await second.try_thread(ThreadId("t-lock"))
    assert again is not None and again.fence is not None
    assert _token(isolated_database_url, "t-lock") == again.fence.token
    await again.release()


async def test_the_fence_statement_reads_the_threads_owner(
    two_replicas: tuple[Locks, Locks], isolated_database_url: str
) -> None:
    first, _ = two_replicas
    lease = await first.try_run(ThreadId("t-owner"), TenantId("acme"), UserId("u1"))
    assert lease is not None and lease.owner is None  # no checkpoint yet: nobody owns the thread
    await lease.release()
    async with await psycopg.AsyncConnection.connect(
        isolated_database_url, autocommit=True, row_factory=dict_row
    ) as conn:
        saver = PooledPostgresSaver(conn)
        config: RunnableConfig = {"configurable": {"thread_id": "t-owner", "checkpoint_ns": ""}}
        for user in ("u1", "u2"):  # the first checkpoint's writer is the owner
            config = await saver.aput(config, empty_checkpoint(), {"tenant_id": "acme", "user_id": user}, {})  # type: ignore[typeddict-unknown-key]
        assert await first_checkpoint_owner(conn, ThreadId("t-owner")) == ("acme", "u1")
    token_before = _token(isolated_database_url, "t-owner")
    with pytest.raises(OwnedByAnother):  # another caller's thread: refused before any lock
        await first.try_run(ThreadId("t-owner"), TenantId("acme"), UserId("u2"))
    assert not first.holds_thread(ThreadId("t-owner"))
    assert _token(isolated_database_url, "t-owner") == token_before
    lease = await first.try_run(ThreadId("t-owner"), TenantId("acme"), UserId("u1"))
    assert lease is not None and lease.owner == ("acme", "u1")  # read under the lock
    assert _token(isolated_database_url, "t-owner") == (lease.fence.token if lease.fence else None)
    await lease.release()


async def test_a_lock_whose_fence_cannot_be_set_is_given_back(
    two_replicas: tuple[Locks, Locks], isolated_database_url: str
) -> None:
    first, second = two_replicas
    with psycopg.connect(isolated_database_url, autocommit=True) as conn:
        conn.execute("alter table thread_fences rename to thread_fences_away")
    with pytest.raises(psycopg.errors.UndefinedTable):
        await first.try_run(ThreadId("t-nofence"), TenantId("acme"), UserId("u1"))
    with psycopg.connect(isolated_database_url, autocommit=True) as conn:
        conn.execute("alter table thread_fences_away rename to thread_fences")
    lease = await second.try_run(
        ThreadId("t-nofence"), TenantId("acme"), UserId("u1")
    )  # neither the thread nor the user key was kept
    assert lease is not None
    await lease.release()
    assert not first.holds_thread(ThreadId("t-nofence"))


async def test_a_new_window_deletes_the_users_older_ones(pool: Pool, migrated_database_url: str) -> None:
    old = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        for user in ("u-old", "u-other"):
            conn.execute(
                "insert into run_rate_windows (tenant_id, user_id, window_start, runs) values ('acme', %s, %s, 3)",
                (user, old),
            )
    limiter = RateLimiter(pool, per_minute=2)
    caller = CallerContext(TenantId("acme"), UserId("u-old"))
    assert await limiter.consume(caller) is None
    assert await limiter.consume(caller) is None
    assert await limiter.consume(caller) is not None  # the window is full: seconds to wait
    with psycopg.connect(migrated_database_url) as conn:
        rows = conn.execute("select user_id, runs from run_rate_windows order by user_id").fetchall()
    assert rows == [("u-old", 2), ("u-other", 3)]  # the user's old window went, another user's stays
