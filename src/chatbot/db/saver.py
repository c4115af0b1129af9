"""The checkpointer: `AsyncPostgresSaver` without its instance lock when it runs on a pool.

`AsyncPostgresSaver._cursor` takes `self.lock` (one `asyncio.Lock` per saver) around
every call, pool or not. The lock exists to keep coroutines off one shared connection;
on a pool every `_cursor` call checks out a connection of its own, so the lock only
makes every run of the replica queue behind every other run's checkpoint reads and
writes (including the blob serialisation `aput` does while holding it). At 16
concurrent runs it cost us throughput and latency (docs/measurements/performance.md, "Runs").
The store (`AsyncPostgresStore`) already skips its lock for pools; the same change for
the saver is proposed upstream (langchain-ai/langgraph#7259, PR #7269).

It also reads checkpoints with statements of the service's own (db/langgraph_tables.py):
the library's get-checkpoint, list and delta-channel walk name the thread only through the
outer row in their subqueries, which a Citus cluster runs on every shard (or, for the
get-checkpoint join with `jsonb_each_text`, refuses). Same rows, same decoding (the
library's own methods), one shard.

One more change patches the library module itself, process-wide: the saver's own
construction applies it (`_apply_library_patches`, idempotent), so nothing that builds a
saver (the app, a command, a bench) can forget it. The saver writes with
`db/checkpoints.SERDE`, the serializer the service's own reads decode with.

This relies on library internals, so it is pinned: constructing the saver fails when
the installed langgraph-checkpoint-postgres is outside the versions we verified, and
tests/db/test_saver.py fails when the library stops doing what we rely on. When the
upstream fix ships, drop this module and use `AsyncPostgresSaver` again.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Literal, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver, Conn
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncCursor, AsyncPipeline
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from chatbot.db import langgraph_tables
from chatbot.db._read_ahead import (
    FORESEEN_THREADS,
    Chains,
    CheckpointRead,
    ReadAhead,
    ReadBack,
    Seeds,
    foreseen,
    keep,
    send_second_stage,
)
from chatbot.db.checkpoints import SERDE
from chatbot.db.joined_writes import Kept, Recorder, joining, recording
from chatbot.db.locks import Fence, fenced_transaction
from chatbot.ids import ThreadId

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
# A read-back of a run that found no checkpoint is kept as None: `_NOT_READ` tells "none kept".
_NOT_READ = object()


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


def _apply_library_patches() -> None:
    """Patch langgraph-checkpoint-postgres for the whole process: serialising on the loop.

    Every saver's construction calls it; calling it again changes nothing. Refuses library
    versions the patches were not verified on.
    """
    langgraph_tables.check_version()
    _serialise_on_the_loop()


class PooledPostgresSaver(AsyncPostgresSaver):
    """Checkpoint to Postgres like `AsyncPostgresSaver`, letting calls on a pool run concurrently."""

    def __init__(self, conn: Conn, pipe: AsyncPipeline | None = None, serde: SerializerProtocol | None = None) -> None:
        """Build the saver; on a pool, replace the instance lock by one that never waits."""
        # One check for the lock replaced below, the patches and the statements on the
        # library's tables (db/langgraph_tables.py): the app builds its saver once, at start-up.
        _apply_library_patches()
        super().__init__(conn, pipe, serde or SERDE)
        # Only on a pool: a single shared connection (and a pipeline, which the library
        # allows only on one) still needs the lock to keep coroutines off it.
        if isinstance(conn, AsyncConnectionPool):
            self.lock = _PoolLock()
        # The graph's delta channels, as its first history read named them: every later
        # checkpoint read sends the walk's first page beside it (`aget_tuple`).
        self._delta_channels: tuple[str, ...] = ()
        # What the reads of a run sent ahead for its walks (db/_read_ahead.py).
        self._ahead = ReadAhead()

    # The reads below are the library's methods (3.2) with its statements replaced by
    # db/langgraph_tables.py's, which Citus routes to the thread's shard; the decoding and
    # the walk's bookkeeping are the library's own methods, unchanged.

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint of `config` (the thread's newest without a checkpoint_id), None when absent."""
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        fence = configurable.get(FENCE_KEY)
        if fence and not get_checkpoint_id(config):
            # The run's input write read its checkpoint back in the same flush (`ReadBack`).
            read_back = self._ahead.read_backs.pop((fence.token, thread_id, checkpoint_ns), _NOT_READ)
            if read_back is not _NOT_READ:
                return None if read_back is None else await self._load_checkpoint_tuple(read_back)
        async with self._cursor() as cur:
            value = await self._checkpoint_row(
                cur, thread_id, checkpoint_ns, get_checkpoint_id(config), foresee=fence is not None
            )
            if value is None:
                return None
            if value["checkpoint"]["v"] < 4 and value["parent_checkpoint_id"]:
                await cur.execute(self.SELECT_PENDING_SENDS_SQL, (thread_id, [value["parent_checkpoint_id"]]))
                if sends := await cur.fetchone():
                    if value["channel_values"] is None:
                        value["channel_values"] = []
                    self._migrate_pending_sends(sends["sends"], value["checkpoint"], value["channel_values"])
            return await self._load_checkpoint_tuple(value)

    async def _checkpoint_row(
        self,
        cur: AsyncCursor[DictRow],
        thread_id: ThreadId,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        *,
        foresee: bool = False,
    ) -> Any:
        """Read one checkpoint's row; on a pool, with the delta walk's first page in the same round trip.

        A graph with delta channels reads their history right after the checkpoint (three
        round trips: the row, the walk, the writes). The walk's first page goes out beside the
        row, pipelined, and is kept for `aget_delta_channel_history` under the checkpoint's id.
        `foresee` (a run's read, which holds the thread) sends the walk's second stage too, as
        the thread's last walk foresaw it (db/_read_ahead.py). Pipelined even alone: outside a
        pipeline, a connection's first run of a statement waits for its preparation.
        """
        if not isinstance(self.conn, AsyncConnectionPool):
            return await langgraph_tables.checkpoint_row(cur, ThreadId(thread_id), checkpoint_ns, checkpoint_id)
        thread = ThreadId(thread_id)
        read = CheckpointRead(
            self._ahead, thread, checkpoint_ns, checkpoint_id, self._delta_channels, DELTA_WALK_PAGE, foresee
        )
        async with cur.connection.pipeline():
            await read.send(cur.connection, cur)
        return await read.fetch()

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Yield the matching checkpoints newest first, as `AsyncPostgresSaver.alist` does."""
        configurable = config["configurable"] if config else {}
        async with self._cursor() as cur:
            values = await langgraph_tables.checkpoint_rows(
                cur,
                configurable["thread_id"] if config else None,
                checkpoint_ns=configurable.get("checkpoint_ns"),
                checkpoint_id=get_checkpoint_id(config) if config else None,
                metadata=Jsonb(filter) if filter else None,
                before=get_checkpoint_id(before) if before is not None else None,
                limit=limit,
            )
            if not values:
                return
            if to_migrate := [v for v in values if v["checkpoint"]["v"] < 4 and v["parent_checkpoint_id"]]:
                await cur.execute(
                    self.SELECT_PENDING_SENDS_SQL,
                    (values[0]["thread_id"], [v["parent_checkpoint_id"] for v in to_migrate]),
                )
                grouped_by_parent = defaultdict(list)
                for value in to_migrate:
                    grouped_by_parent[value["parent_checkpoint_id"]].append(value)
                async for sends in cur:
                    for value in grouped_by_parent[sends["checkpoint_id"]]:
                        if value["channel_values"] is None:
                            value["channel_values"] = []
                        self._migrate_pending_sends(sends["sends"], value["checkpoint"], value["channel_values"])
            for value in values:
                yield await self._load_checkpoint_tuple(value)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Return each DeltaChannel's writes since its last snapshot, as the library does.

        The walk reads `DELTA_WALK_PAGE` checkpoints a page.
        """
        if not channels:
            return {}
        channels = list(channels)
        self._delta_channels = tuple(channels)
        thread_id = config["configurable"]["thread_id"]
        checkpoint_ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            target = await self.aget_tuple(config)
            if target is None:
                return {ch: {"writes": []} for ch in channels}
            checkpoint_id = target.config["configurable"]["checkpoint_id"]

        parent_of: dict[str, str | None] = {}
        ver_by_i_by_cid: list[dict[str, str | None]] = [{} for _ in channels]
        hb_by_i_by_cid: list[dict[str, bool]] = [{} for _ in channels]
        inline_by_i_by_cid: list[dict[str, Any]] = [{} for _ in channels]
        chain_by_ch: dict[str, list[str]] = {ch: [] for ch in channels}
        seed_ver_by_ch: dict[str, str | None] = {ch: None for ch in channels}
        seed_inline_by_ch: dict[str, Any] = {}
        walk_cursor_by_ch: dict[str, str | None] = {}
        seeded: set[str] = set()
        cursor: str | None = checkpoint_id
        first = True
        async with self._cursor() as cur:
            while cursor is not None:
                sent = (
                    self._ahead.first_pages.pop((thread_id, checkpoint_ns, cursor, tuple(channels)), None)
                    if first
                    else None
                )
                page = sent or await langgraph_tables.delta_walk_page(
                    cur, thread_id, checkpoint_ns, channels, cursor=cursor, include_cursor=first, page=DELTA_WALK_PAGE
                )
                if not page:
                    break
                oldest = self._ingest_stage1_page(
                    page, channels, parent_of, ver_by_i_by_cid, hb_by_i_by_cid, inline_by_i_by_cid
                )
                self._try_advance_walks(
                    checkpoint_id,
                    channels,
                    parent_of,
                    ver_by_i_by_cid,
                    hb_by_i_by_cid,
                    inline_by_i_by_cid,
                    chain_by_ch,
                    seed_ver_by_ch,
                    seed_inline_by_ch,
                    walk_cursor_by_ch,
                    seeded,
                )
                if len(seeded) == len(channels) or len(page) < DELTA_WALK_PAGE:
                    break
                cursor, first = oldest, False

            chains = tuple((ch, tuple(chain_by_ch[ch])) for ch in channels if chain_by_ch[ch])
            seeds = tuple((ch, seed) for ch in channels if (seed := seed_ver_by_ch[ch]) is not None)
            read = self._ahead.second_stages.pop((thread_id, checkpoint_ns, checkpoint_id, tuple(channels)), None)
            if read is not None and read.answers(chains, seeds):
                # Read beside this checkpoint's own read, for exactly this walk.
                rows = read.rows or []
            else:
                rows = await self._second_stage_rows(cur, ThreadId(thread_id), checkpoint_ns, chains, seeds)
        if checkpoint_id in parent_of:
            # The walk read the checkpoint's own row too: enough to foresee its child's second stage.
            snapshots = []
            for i in range(len(channels)):
                inline = inline_by_i_by_cid[i].get(checkpoint_id)
                stored = hb_by_i_by_cid[i].get(checkpoint_id, False) or inline is not None
                snapshots.append((ver_by_i_by_cid[i].get(checkpoint_id), stored))
            child = foreseen(checkpoint_id, channels, snapshots, chain_by_ch, seed_ver_by_ch)
            keep(self._ahead.foreseen, (thread_id, checkpoint_ns, tuple(channels)), child, most=FORESEEN_THREADS)
        return self._build_delta_channels_writes_history(
            channels=channels,
            chain_by_ch=chain_by_ch,
            seed_ver_by_ch=seed_ver_by_ch,
            seed_inline_by_ch=seed_inline_by_ch,
            stage2_rows=rows,
        )

    async def _second_stage_rows(
        self,
        cur: AsyncCursor[DictRow],
        thread: ThreadId,
        checkpoint_ns: str,
        chains: Chains,
        seeds: Seeds,
    ) -> list[Any]:
        """Read the walk's second stage; on a pool as a pipeline of one (its first run prepares it for free)."""
        if not isinstance(self.conn, AsyncConnectionPool):
            sent = await send_second_stage(cur, thread, checkpoint_ns, chains, seeds)
        else:
            async with cur.connection.pipeline():
                sent = await send_second_stage(cur, thread, checkpoint_ns, chains, seeds)
        return list(await cur.fetchall()) if sent else []


# Where a run's config carries its thread lease's fence (db/locks.py). Keys starting with
# "__" are never copied into checkpoint metadata by the library.
FENCE_KEY = "__chatbot_fence__"
_writing_under: ContextVar[Fence | None] = ContextVar("chatbot_fence", default=None)


def fenced(config: RunnableConfig, fence: Fence) -> RunnableConfig:
    """Return `config` with the fence every checkpoint write of the run must pass."""
    return {**config, "configurable": {**config.get("configurable", {}), FENCE_KEY: fence}}


def run_fence(config: RunnableConfig) -> Fence | None:
    """Return the fence every write of the config's run must pass, None for a run without one (Studio, tools)."""
    fence = config.get("configurable", {}).get(FENCE_KEY)
    return fence if isinstance(fence, Fence) else None


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
        """Save pending writes, fenced when the config carries a fence.

        Inside `joined_writes.writes_join_next_checkpoint`, a fenced run's writes are kept and sent in the
        transaction of its next checkpoint write instead (one round trip for both).
        """
        kept_so_far = joining.get()
        fence = config["configurable"].get(FENCE_KEY)
        if kept_so_far is None or fence is None or not isinstance(self.conn, AsyncConnectionPool):
            async with _fenced_write(config):
                await super().aput_writes(config, writes, task_id, task_path)
            return
        recorder = Recorder()
        token = recording.set(recorder)
        try:
            await super().aput_writes(config, writes, task_id, task_path)
        finally:
            recording.reset(token)
        kept_so_far.append(Kept(self, fence, recorder.calls))

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        recorder = recording.get()
        if recorder is not None:
            yield cast(AsyncCursor[DictRow], recorder)
            return
        fence = _writing_under.get()
        if fence is None or not isinstance(self.conn, AsyncConnectionPool):
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        joins = joining.get() is not None
        read_back = ReadBack(self._ahead, fence, self._delta_channels, DELTA_WALK_PAGE) if joins else None
        after = read_back.send if read_back is not None else None
        async with self.conn.connection() as conn, fenced_transaction(conn, fence, after_commit=after):
            async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                await self._send_kept(cur, fence)
                yield cur
        if read_back is not None:
            await read_back.keep()

    async def _send_kept(self, cur: AsyncCursor[DictRow], fence: Fence) -> None:
        """Send this saver's kept writes of `fence` first in the transaction `cur` is in."""
        kept_so_far = joining.get()
        if not kept_so_far:
            return
        for kept in [k for k in kept_so_far if k.saver is self and k.fence == fence]:
            kept_so_far.remove(kept)
            for query, params in kept.calls:
                await cur.executemany(query, params)

    async def write_kept(self, kept: Kept) -> None:
        """Write kept pending writes in a fenced transaction of their own (no checkpoint followed them)."""
        token = _writing_under.set(kept.fence)
        try:
            async with self._cursor() as cur:
                for query, params in kept.calls:
                    await cur.executemany(query, params)
        finally:
            _writing_under.reset(token)


@asynccontextmanager
async def _fenced_write(config: RunnableConfig) -> AsyncIterator[None]:
    """Make `_cursor` check the config's fence (if any) for the writes inside."""
    token = _writing_under.set(run_fence(config))
    try:
        yield
    finally:
        _writing_under.reset(token)
