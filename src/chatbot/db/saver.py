"""The checkpointer: `AsyncPostgresSaver` without its instance lock when it runs on a pool.

`AsyncPostgresSaver._cursor` takes `self.lock` (one `asyncio.Lock` per saver) around
every call, pool or not. The lock exists to keep coroutines off one shared connection;
on a pool every `_cursor` call checks out a connection of its own, so the lock only
makes every run of the replica queue behind every other run's checkpoint reads and
writes (including the blob serialisation `aput` does while holding it). At 16
concurrent runs it cost us throughput and latency (docs/measurements/performance.md, "Runs").
The store (`AsyncPostgresStore`) already skips its lock for pools; the same change for
the saver is proposed upstream (langchain-ai/langgraph#7259, PR #7269).

Two more changes patch the library module itself, process-wide: `apply_library_patches`
does both, once, at start-up (`create_app`, and the commands and benches that build a
saver without the app), never from a constructor.

This relies on library internals, so it is pinned: constructing the saver fails when
the installed langgraph-checkpoint-postgres is outside the versions we verified, and
tests/db/test_saver.py fails when the library stops doing what we rely on. When the
upstream fix ships, drop this module and use `AsyncPostgresSaver` again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Literal, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver, Conn
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncCursor, AsyncPipeline
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from chatbot.db import langgraph_tables
from chatbot.db.locks import Fence, LeaseLost

T = TypeVar("T")


# Verified on the versions of `langgraph_tables.VERIFIED_VERSIONS` (the `_cursor` of that line
# takes `self.lock` and nothing else does); `langgraph_tables.check_version` refuses others.
class _PoolLock(asyncio.Lock):
    """Stand in for the instance lock: acquiring it never waits (each call has its own connection)."""

    async def acquire(self) -> Literal[True]:
        """Return at once."""
        return True

    def release(self) -> None:
        """Do nothing: nothing was held."""


# Reading a `DeltaChannel` walks back from the checkpoint to the channel's last snapshot;
# the library scans that walk in pages of 1024 checkpoint rows (each with a JSONB
# extraction and a blob probe), though our transcript channel snapshots every 50 updates
# (at most ~50 checkpoints back). A full first page made every run's two state loads
# cost more as the thread grew, up to 1024 checkpoints (aget_state: 1.6 ms at 10 turns,
# 36 ms at 1000). A smaller page reads what the walk needs; a longer walk just takes more
# pages (the loop pages until it finds the snapshot), so results are unchanged.
DELTA_WALK_PAGE = 64


def _tune_delta_walk_page() -> None:
    import langgraph.checkpoint.postgres.aio as library

    library._DELTA_PAGE_SIZE = DELTA_WALK_PAGE


class _ThreadlessAsyncio:
    """The library module's `asyncio`, except that `to_thread` calls its function at once.

    `AsyncPostgresSaver` serialises a checkpoint's blobs and writes, and loads a tuple's
    pending writes, in `asyncio.to_thread`. That work is Python (and ormsgpack) holding the
    GIL, so the worker thread spares the event loop nothing; it only adds a hop per call
    (a future, a worker wake-up, a `call_soon_threadsafe` back), about six of them per run,
    and the GIL handed back and forth at hundreds of runs in flight (docs/measurements/performance.md,
    "CPU per run, second round"). Everything else is the real `asyncio`.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def to_thread(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Return `func(*args, **kwargs)`, called on the loop."""
        return func(*args, **kwargs)


def _serialise_on_the_loop() -> None:
    import langgraph.checkpoint.postgres.aio as library

    library.asyncio = _ThreadlessAsyncio()  # type: ignore[assignment]


def apply_library_patches() -> None:
    """Patch langgraph-checkpoint-postgres for the whole process: smaller delta walks, serialising on the loop.

    Called once at start-up, before any saver runs; calling it again changes nothing.
    Refuses library versions the patches were not verified on.
    """
    langgraph_tables.check_version()
    _tune_delta_walk_page()
    _serialise_on_the_loop()


class PooledPostgresSaver(AsyncPostgresSaver):
    """Checkpoint to Postgres like `AsyncPostgresSaver`, letting calls on a pool run concurrently."""

    def __init__(self, conn: Conn, pipe: AsyncPipeline | None = None, serde: SerializerProtocol | None = None) -> None:
        """Build the saver; on a pool, replace the instance lock by one that never waits."""
        # One check for the lock replaced below and the statements on the library's tables
        # (db/langgraph_tables.py): the app builds its saver once, at start-up.
        langgraph_tables.check_version()
        super().__init__(conn, pipe, serde)
        # Only on a pool: a single shared connection (and a pipeline, which the library
        # allows only on one) still needs the lock to keep coroutines off it.
        if isinstance(conn, AsyncConnectionPool):
            self.lock = _PoolLock()


# Where a run's config carries its thread lease's fence (db/locks.py). Keys starting with
# "__" are never copied into checkpoint metadata by the library.
FENCE_KEY = "__chatbot_fence__"
_FENCE_LOST = "CB001"  # SQLSTATE raised by chatbot_hold_fence (migration 0005)
_writing_under: ContextVar[Fence | None] = ContextVar("chatbot_fence", default=None)


def fenced(config: RunnableConfig, fence: Fence) -> RunnableConfig:
    """Return `config` with the fence every checkpoint write of the run must pass."""
    return {**config, "configurable": {**config.get("configurable", {}), FENCE_KEY: fence}}


class FencedPostgresSaver(PooledPostgresSaver):
    """Refuse a run's checkpoint writes once its thread lock has passed to another holder.

    The check runs in the write's own transaction (one pipeline, no extra round trip) and
    share-locks the thread's fence row, so a new holder's token update waits for a write
    already under way, and a write after it fails with `LeaseLost`. Writes without a
    fence in their config (tools, tests, migrations) are not checked.
    """

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint, fenced when the config carries a fence."""
        async with _fenced_write(config):
            return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Save pending writes, fenced when the config carries a fence."""
        async with _fenced_write(config):
            await super().aput_writes(config, writes, task_id, task_path)

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        fence = _writing_under.get()
        if fence is None or not isinstance(self.conn, AsyncConnectionPool):
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        async with self.conn.connection() as conn, conn.pipeline(), conn.transaction():
            await conn.execute("select chatbot_hold_fence(%s, %s)", (fence.thread_id, fence.token))
            async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur


@asynccontextmanager
async def _fenced_write(config: RunnableConfig) -> AsyncIterator[None]:
    """Make `_cursor` check the config's fence (if any) for the writes inside."""
    token = _writing_under.set(config["configurable"].get(FENCE_KEY))
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate == _FENCE_LOST:
            raise LeaseLost("the run's thread lock passed to another holder") from exc
        raise
    finally:
        _writing_under.reset(token)
