"""The lock-free pooled checkpointer, and the library behaviour it relies on.

These tests fail loudly when langgraph-checkpoint-postgres changes under us: a version
outside the verified range, an `AsyncPostgresSaver._cursor` that no longer takes the
instance lock (then the workaround may be obsolete: see chatbot/db/saver.py), or a saver
that no longer lets two calls on a pool run at the same time.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import aio
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row

from chatbot.db.langgraph_tables import check_version, installed_version
from chatbot.db.pool import Pool
from chatbot.db.saver import PooledPostgresSaver
from chatbot.ids import ThreadId
from tests.fixtures.wait import wait_until

LockConn = psycopg.AsyncConnection[dict[str, object]]
# A call stuck behind a lock never answers; one that runs answers in milliseconds.
BLOCKED_AFTER = 2.0


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


@asynccontextmanager
async def checkpoint_writes_blocked(database_url: str) -> AsyncIterator[LockConn]:
    """Hold a lock that makes every checkpoint write wait in Postgres (reads still pass)."""
    async with await psycopg.AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
        await conn.execute("lock table checkpoints in exclusive mode")  # opens a transaction
        yield conn
        await conn.rollback()


async def wait_for_blocked_write(conn: LockConn) -> None:
    """Return once some session is waiting for the lock on `checkpoints`."""

    async def blocked() -> bool:
        row = await (
            await conn.execute(
                "select count(*) as n from pg_locks where not granted and relation = 'checkpoints'::regclass"
            )
        ).fetchone()
        return bool(row and int(str(row["n"])) > 0)

    await wait_until(blocked, what="a checkpoint write waiting in Postgres")


async def read_while_a_write_waits(saver: AsyncPostgresSaver, database_url: str) -> bool:
    """Return whether a read answers while another call of the same saver waits in Postgres."""
    writer_thread = f"w-{uuid.uuid4().hex[:8]}"
    async with checkpoint_writes_blocked(database_url) as blocker:
        write = asyncio.create_task(saver.aput(_config(writer_thread), empty_checkpoint(), {}, {}))
        await wait_for_blocked_write(blocker)
        try:
            await asyncio.wait_for(saver.aget_tuple(_config(f"r-{uuid.uuid4().hex[:8]}")), BLOCKED_AFTER)
            answered = True
        except TimeoutError:
            answered = False
    await asyncio.wait_for(write, 10)  # the write goes through once the table lock is gone
    assert await saver.aget_tuple(_config(writer_thread)) is not None
    return answered


def test_installed_library_is_a_verified_version() -> None:
    check_version()  # raises, naming the installed and the verified versions, after an upgrade
    assert installed_version() >= (3, 2, 0)


def test_library_cursor_still_takes_the_instance_lock() -> None:
    # What PooledPostgresSaver neutralises: the one place the async saver takes `self.lock`.
    cursor = inspect.getsource(AsyncPostgresSaver._cursor)
    assert "async with self.lock" in cursor, "AsyncPostgresSaver._cursor no longer takes self.lock"
    module = inspect.getsource(aio)
    uses = module.count("self.lock")
    assert uses == 2, f"self.lock now appears {uses} times in {aio.__file__}; re-verify chatbot.db.saver"


@pytest.mark.plain_postgres(reason="the library's own reads are what Citus refuses (db/langgraph_tables.py)")
async def test_library_saver_on_a_pool_still_serialises_calls(pool: Pool, migrated_database_url: str) -> None:
    # If this starts failing, upstream fixed the lock (langgraph#7259): drop chatbot.db.saver.
    saver = AsyncPostgresSaver(pool)
    assert not await read_while_a_write_waits(saver, migrated_database_url)


async def test_pooled_saver_runs_calls_concurrently(pool: Pool, migrated_database_url: str) -> None:
    saver = PooledPostgresSaver(pool)
    assert await read_while_a_write_waits(saver, migrated_database_url)


async def test_pooled_saver_keeps_the_lock_on_a_single_connection(migrated_database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True, row_factory=dict_row
    ) as conn:
        saver = PooledPostgresSaver(conn)
        await saver.aput(_config("single"), empty_checkpoint(), {}, {})
        lock_is_real = type(saver.lock) is asyncio.Lock
        read = await saver.aget_tuple(_config("single"))
    assert lock_is_real
    assert read is not None


async def test_pooled_saver_refuses_an_unverified_library(monkeypatch: pytest.MonkeyPatch, pool: Pool) -> None:
    monkeypatch.setattr("chatbot.db.langgraph_tables.version", lambda _: "3.3.0")
    with pytest.raises(RuntimeError, match=r"chatbot\.db\.saver were checked on"):
        PooledPostgresSaver(pool)


def test_the_saver_serialises_on_the_loop_where_the_library_would_hop_to_a_thread() -> None:
    """Fail loudly if the library stops reaching `to_thread` through its module's `asyncio`."""
    import asyncio

    import langgraph.checkpoint.postgres.aio as library

    from chatbot.db.saver import _serialise_on_the_loop

    _serialise_on_the_loop()
    for method in (library.AsyncPostgresSaver.aput, library.AsyncPostgresSaver.aput_writes):
        assert "asyncio.to_thread(" in inspect.getsource(method)
    assert library.asyncio.to_thread is not asyncio.to_thread
    assert library.asyncio.Lock is asyncio.Lock  # the rest is the real module

    async def called_at_once() -> int:
        return await library.asyncio.to_thread(lambda a, b: a + b, 2, b=3)

    assert asyncio.run(called_at_once()) == 5


async def test_the_library_patches_are_applied_by_building_a_saver(monkeypatch: pytest.MonkeyPatch, pool: Pool) -> None:
    import langgraph.checkpoint.postgres.aio as library

    from chatbot.db.saver import _ThreadlessAsyncio

    monkeypatch.setattr(library, "asyncio", asyncio)
    PooledPostgresSaver(pool)  # what the app, a command or a bench does: nothing else to remember
    assert isinstance(library.asyncio, _ThreadlessAsyncio)


@pytest.mark.plain_postgres(reason="compares with the library's own reads, which Citus refuses")
async def test_the_savers_own_reads_return_what_the_librarys_return(
    isolated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every checkpoint, list and delta-channel history of a stored thread, read both ways (db/langgraph_tables.py)."""
    from tests.fixtures.stored_format.make_fixture import TABLES
    from tests.foundation.test_stored_format import MANIFEST, load_rows

    counts = await load_rows(isolated_database_url)
    assert all(counts[table] > 0 for table in TABLES), counts
    thread = MANIFEST["thread_id"]
    async with await psycopg.AsyncConnection.connect(
        isolated_database_url, autocommit=True, row_factory=dict_row
    ) as conn:
        ours, library = PooledPostgresSaver(conn), AsyncPostgresSaver(conn)
        newest = await ours.aget_tuple(_config(thread))
        assert newest is not None and newest == await library.aget_tuple(_config(thread))
        everything = [t async for t in library.alist(_config(thread))]
        assert len(everything) > 50 and [t async for t in ours.alist(_config(thread))] == everything
        assert any(t.pending_writes for t in everything)  # the writes' subquery is exercised
        for listed in everything:
            assert await ours.aget_tuple(listed.config) == listed
        middle = everything[len(everything) // 2].config
        arguments: list[dict[str, Any]] = [{"limit": 3}, {"before": middle}, {"filter": {"source": "loop"}, "limit": 5}]
        for kwargs in arguments:
            assert [t async for t in ours.alist(_config(thread), **kwargs)] == [
                t async for t in library.alist(_config(thread), **kwargs)
            ], kwargs
        assert [t async for t in ours.alist(None, limit=4)] == [t async for t in library.alist(None, limit=4)]
        assert await ours.aget_tuple(_config("no-such-thread")) is None
        # The DeltaChannel (the recent messages) rebuilt at every checkpoint, the walk paged
        # in fives so that it crosses pages, then in the service's page size.
        for page in (5, 64):
            monkeypatch.setattr("chatbot.db.saver.DELTA_WALK_PAGE", page)
            for config in [*(t.config for t in everything), _config(thread)]:
                got = await ours.aget_delta_channel_history(config=config, channels=["messages", "summary"])
                assert got == await library.aget_delta_channel_history(config=config, channels=["messages", "summary"])


CHANNELS = ["messages", "summary"]


@pytest.fixture
async def stored_thread(isolated_database_url: str) -> str:
    """Return the id of the stored-format fixture's thread, its rows copied into the test's database."""
    from tests.foundation.test_stored_format import MANIFEST, load_rows

    await load_rows(isolated_database_url)
    return str(MANIFEST["thread_id"])


@pytest.mark.plain_postgres(reason="compares with the library's own reads, which Citus refuses")
async def test_a_walk_foresees_the_second_stage_its_child_checkpoint_asks(
    isolated_database_url: str, stored_thread: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a checkpoint's walk foresees for its child is what the child's walk asks, snapshots crossed."""
    thread = stored_thread
    async with await psycopg.AsyncConnection.connect(
        isolated_database_url, autocommit=True, row_factory=dict_row
    ) as conn:
        ours, library = PooledPostgresSaver(conn), AsyncPostgresSaver(conn)
        oldest_first = [t async for t in library.alist(_config(thread))][::-1]
        asked: list[tuple[Any, Any]] = []
        read = ours._second_stage_rows

        async def noting(cur: Any, thread_id: Any, ns: str, chains: Any, seeds: Any) -> list[Any]:
            asked.append((chains, seeds))
            return await read(cur, thread_id, ns, chains, seeds)

        monkeypatch.setattr(ours, "_second_stage_rows", noting)
        await ours.aget_delta_channel_history(config=oldest_first[0].config, channels=CHANNELS)
        seeded_by_parent = 0
        for parent, child in itertools.pairwise(oldest_first):
            assert child.parent_config is not None
            assert (
                child.parent_config["configurable"]["checkpoint_id"] == parent.config["configurable"]["checkpoint_id"]
            )
            foreseen = ours._ahead.foreseen[(thread, "", tuple(CHANNELS))]  # by the parent's walk, just before
            got = await ours.aget_delta_channel_history(config=child.config, channels=CHANNELS)
            assert (foreseen.chains, foreseen.seeds) == asked[-1]
            assert got == await library.aget_delta_channel_history(config=child.config, channels=CHANNELS)
            seeded_by_parent += any(len(chain) == 1 for _, chain in foreseen.chains)
        assert len(oldest_first) > 50 and seeded_by_parent > 0  # a snapshot's child walked too


@pytest.mark.plain_postgres(reason="compares with the library's own reads, which Citus refuses")
async def test_a_runs_walk_takes_the_second_stage_read_beside_its_checkpoint(
    isolated_database_url: str, stored_thread: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fenced run's checkpoint read brings the walk's foreseen second stage; its walk reads nothing more."""
    from chatbot.db.locks import Fence
    from chatbot.db.pool import make_pool
    from chatbot.db.saver import fenced
    from tests.fixtures.postgres import settings_for

    thread = stored_thread
    pool = make_pool(isolated_database_url, settings_for(isolated_database_url), name="test", min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        ours, library = PooledPostgresSaver(pool), AsyncPostgresSaver(pool)
        newest_first = [t async for t in library.alist(_config(thread), limit=2)]
        newest, parent = newest_first
        await ours.aget_delta_channel_history(config=parent.config, channels=CHANNELS)
        read_again: list[object] = []

        async def refused(*args: Any) -> list[Any]:
            read_again.append(args)
            raise AssertionError("the second stage was read again")

        monkeypatch.setattr(ours, "_second_stage_rows", refused)
        run = fenced(_config(thread), Fence(ThreadId(thread), "token"))
        loaded = await ours.aget_tuple(run)
        assert loaded is not None and loaded.config["configurable"]["checkpoint_id"] == newest.checkpoint["id"]
        got = await ours.aget_delta_channel_history(config=loaded.config, channels=CHANNELS)
        assert not read_again
        assert got == await library.aget_delta_channel_history(config=newest.config, channels=CHANNELS)
        # A walk nothing was read ahead for reads its own.
        monkeypatch.setattr(ours, "_second_stage_rows", PooledPostgresSaver._second_stage_rows.__get__(ours))
        assert await ours.aget_delta_channel_history(config=parent.config, channels=CHANNELS) == (
            await library.aget_delta_channel_history(config=parent.config, channels=CHANNELS)
        )
    finally:
        await pool.close()
