"""Every statement on the tables LangGraph's libraries own, in one place, checked against one version.

langgraph-checkpoint-postgres creates and owns `checkpoints`, `checkpoint_blobs`,
`checkpoint_writes` and `checkpoint_migrations` (the saver) and `store`, `store_vectors`,
`store_migrations` and `vector_migrations` (the store; the vector tables exist only with an
index configuration, which this service does not use). Their shape can change with any
minor release, so nothing else in the service names them: features call the functions
below, and upgrading the library means re-checking this file (and `db/saver.py`) only.

The rule: the library's public API first (`adelete_thread`, the store's batch operations,
`setup()`); raw SQL only where the API has no equivalent, each statement saying why. Most
reads below are raw because the API loads whole checkpoints (every channel, deserialised)
where the service needs one metadata field or one channel version, on hot paths (the
ownership check of every run, the transcript page, the run record).

Verified on langgraph-checkpoint-postgres 3.2 (checkpoint migrations 0-10, store
migrations 0-3) with langgraph 1.2 and langgraph-checkpoint 4.3; `check_version` refuses
anything else, and tests/db/test_langgraph_tables.py re-checks the columns these
statements use on whatever is installed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib.metadata import version
from typing import Any, TypedDict

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.types.json import Jsonb

from chatbot.db.catalogue import tables_with_column
from chatbot.db.rows import fetch_all, fetch_one
from chatbot.ids import RunId, TenantId, ThreadId, UserId

Conn = AsyncConnection[Any]
Cursor = AsyncCursor[Any]


PACKAGE = "langgraph-checkpoint-postgres"
VERIFIED_VERSIONS = ((3, 2, 0), (3, 3, 0))
"""The langgraph-checkpoint-postgres versions (low inclusive, high exclusive) this module and
`db/saver.py` were checked against: the statements' columns here, the saver's patches there.
Patch releases of the line are accepted because tests/db/test_saver.py and
tests/db/test_langgraph_tables.py re-check the source, the columns and the concurrency on
whatever is installed; a new minor must be re-verified."""

CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
"""The saver's tables keyed by thread; `adelete_thread` of the verified versions empties all three."""

STORE_TABLE = "store"


def installed_version() -> tuple[int, int, int]:
    """Return the installed langgraph-checkpoint-postgres version as (major, minor, patch)."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version(PACKAGE))
    if found is None:
        raise RuntimeError(f"cannot read the version of {PACKAGE}: {version(PACKAGE)!r}")
    return int(found[1]), int(found[2]), int(found[3] or 0)


Bounds = tuple[tuple[int, int, int], tuple[int, int, int]]


def refuse_unless_verified(verified: Bounds, *, who: str, advice: str) -> None:
    """Raise unless the installed langgraph-checkpoint-postgres is within `verified` (low inclusive, high exclusive).

    `who` names what was verified ("chatbot.db.langgraph_tables was checked"), `advice` what
    to re-run before widening the bounds.
    """
    low, high = verified
    found = installed_version()
    if not low <= found < high:
        raise RuntimeError(
            f"{PACKAGE} {'.'.join(map(str, found))} is installed, but {who} "
            f"on >={'.'.join(map(str, low))},<{'.'.join(map(str, high))}: {advice}"
        )


def check_version() -> None:
    """Raise unless the installed langgraph-checkpoint-postgres is one this module and the saver were checked on."""
    refuse_unless_verified(
        VERIFIED_VERSIONS,
        who="chatbot.db.langgraph_tables and chatbot.db.saver were checked",
        advice="re-run tests/db/test_langgraph_tables.py, tests/db/test_saver.py, the erasure, transcript "
        "and record tests and bench/runs.py, then widen VERIFIED_VERSIONS (or use AsyncPostgresSaver if "
        "the library no longer locks pooled savers)",
    )


# --- Schema versions (readiness) -----------------------------------------------------
# Raw: the library has no "is the schema current" call; `setup()` would migrate (DDL),
# which the server must never do. The migrations tables hold one row per applied step.


async def schema_version(conn: Conn, table: str) -> int:
    """Return the newest step recorded in a library migrations table, -1 when it does not exist."""
    exists = await (await conn.execute("select to_regclass(%s) as t", (table,))).fetchone()
    if not exists or exists["t"] is None:
        return -1
    row = await (await conn.execute(sql.SQL("select max(v) as v from {}").format(sql.Identifier(table)))).fetchone()
    return -1 if row is None or row["v"] is None else int(row["v"])


async def schema_problem(conn: Conn) -> str | None:
    """Return why the library's tables are not migrated to the installed version, or None."""
    if await schema_version(conn, "checkpoint_migrations") < len(AsyncPostgresSaver.MIGRATIONS) - 1:
        return "checkpoint tables missing or outdated"
    if await schema_version(conn, "store_migrations") < len(AsyncPostgresStore.MIGRATIONS) - 1:
        return "store tables missing or outdated"
    return None


async def setup(conn: Conn) -> list[str]:
    """Create or upgrade the saver's and the store's tables (public API); return which changed."""
    applied = []
    before = await schema_version(conn, "checkpoint_migrations")
    await AsyncPostgresSaver(conn).setup()
    if await schema_version(conn, "checkpoint_migrations") != before:
        applied.append("checkpointer")
    before = await schema_version(conn, "store_migrations")
    await AsyncPostgresStore(conn).setup()
    if await schema_version(conn, "store_migrations") != before:
        applied.append("store")
    return applied


# --- Who a thread belongs to, and which runs it holds ----------------------------------
# Raw: the owner and run ids are checkpoint *metadata* fields (threads/runs.py writes them);
# `alist(filter=...)` would load and deserialise every matching checkpoint to answer a
# yes/no or one-field question, on every run (the ownership check) and every feedback.
# Root namespace only (`checkpoint_ns = ''`): subgraph checkpoints carry no identity.

OWNER_OF_THREAD = (
    "select metadata ->> 'tenant_id' as tenant_id, metadata ->> 'user_id' as user_id from checkpoints "
    "where thread_id = %(thread)s and checkpoint_ns = '' order by checkpoint_id limit 1"
)
"""The thread's first writer (its owner). Migration 0010's `chatbot_set_fence` reads the same row
beside setting the thread's fence, under the thread's lock (db/locks.py)."""
_RUN_OF_TENANT = (
    "select 1 from checkpoints where thread_id = %s and checkpoint_ns = '' "
    "and metadata ->> 'run_id' = %s and metadata ->> 'tenant_id' = %s limit 1"
)
_THREAD_OF_USER = (
    "select 1 from checkpoints where thread_id = %s and checkpoint_ns = '' "
    "and metadata ->> 'tenant_id' = %s and metadata ->> 'user_id' = %s limit 1"
)
_THREADS_OF_USER = (
    "select distinct thread_id from checkpoints where checkpoint_ns = '' "
    "and metadata ->> 'tenant_id' = %s and metadata ->> 'user_id' = %s"
)


async def first_checkpoint_owner(conn: Conn, thread_id: ThreadId) -> tuple[TenantId, UserId] | None:
    """Return (tenant_id, user_id) of the thread's first checkpoint (ids are time-ordered), None when none."""
    row = await (await conn.execute(OWNER_OF_THREAD, {"thread": thread_id})).fetchone()
    return None if row is None else (TenantId(row["tenant_id"]), UserId(row["user_id"]))


async def run_recorded(conn: Conn, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId) -> bool:
    """Return True when a checkpoint of the thread names `run_id` and the tenant."""
    return await (await conn.execute(_RUN_OF_TENANT, (thread_id, run_id, tenant_id))).fetchone() is not None


async def thread_recorded_for(conn: Conn, thread_id: ThreadId, tenant_id: TenantId, user_id: UserId) -> bool:
    """Return True when a checkpoint of the thread names this tenant and user."""
    row = await (await conn.execute(_THREAD_OF_USER, (thread_id, tenant_id, user_id))).fetchone()
    return row is not None


async def threads_of_user(conn: Conn, tenant_id: TenantId, user_id: UserId) -> list[str]:
    """Return every thread with a checkpoint naming this tenant and user."""
    rows = await (await conn.execute(_THREADS_OF_USER, (tenant_id, user_id))).fetchall()
    return [r["thread_id"] for r in rows]


# --- Idle threads (retention) ----------------------------------------------------------
# Raw: no API lists threads, nor tells a thread's age. `checkpoint_id` is a time-ordered
# UUIDv6, so "newest checkpoint older than X" is a group-by on it (27 ms for 120k rows).

_STALE = """
select thread_id from checkpoints
where checkpoint_ns = '' and thread_id > %s
group by thread_id having max(checkpoint_id) < %s
order by thread_id limit %s
"""
_STILL_STALE = """
select thread_id from checkpoints
where checkpoint_ns = '' and thread_id = any(%s)
group by thread_id having max(checkpoint_id) < %s
"""


_WITH_CHECKPOINTS = "select distinct thread_id from checkpoints where thread_id = any(%s)"


async def threads_with_checkpoints(conn: Conn, thread_ids: Sequence[str]) -> set[str]:
    """Return those of `thread_ids` that have a checkpoint (the others exist only in rows left of them)."""
    rows = await (await conn.execute(_WITH_CHECKPOINTS, (list(thread_ids),))).fetchall()
    return {r["thread_id"] for r in rows}


async def stale_threads(conn: Conn, after: str, floor: str, limit: int) -> list[str]:
    """Return up to `limit` threads after `after` (by id) whose newest checkpoint id is below `floor`."""
    rows = await (await conn.execute(_STALE, (after, floor, limit))).fetchall()
    return [r["thread_id"] for r in rows]


async def still_stale(conn: Conn, thread_ids: Sequence[str], floor: str) -> list[str]:
    """Return those of `thread_ids` whose newest checkpoint id is still below `floor`."""
    rows = await (await conn.execute(_STILL_STALE, (list(thread_ids), floor))).fetchall()
    return [r["thread_id"] for r in rows]


# --- The checkpointer's reads, routable on Citus (db/saver.py) ----------------------------
# Raw, replacing the library's own: its get-checkpoint query joins `jsonb_each_text` to
# `checkpoint_blobs` in a correlated subquery, which Citus cannot plan on a distributed
# `checkpoints` ("invalid attnum 6 for relation jsonb_each_text", citusdata/citus#4644), and
# its subqueries (there and in the delta-channel walk) name the thread only through the outer
# row (`bl.thread_id = checkpoints.thread_id`), which Citus does not prune by: each runs on
# every shard. Here every subquery names the thread by equality with the parameter, so the
# whole statement goes to the one shard holding the thread. Same rows as the library's: a
# channel's blob is the one whose (channel, version) is among the checkpoint's versions (a
# semi-join where the library joins, and the versions' keys are unique), and the columns are
# the library's, decoded by its `_load_checkpoint_tuple`. On one Postgres the plans are the
# library's (the equality adds an index condition the join already implied).


def _checkpoint_select(thread: str) -> str:
    # `thread`: the thread the subqueries name: the parameter, or (listing every thread, rare
    # and multi-shard anyway) the outer row's column.
    return f"""
select thread_id, checkpoint, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata,
    (
        select array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob])
        from checkpoint_blobs bl
        where bl.thread_id = {thread}
            and bl.checkpoint_ns = checkpoints.checkpoint_ns
            and (bl.channel, bl.version) in (
                select key, value from jsonb_each_text(checkpoints.checkpoint -> 'channel_versions')
            )
    ) as channel_values,
    (
        select array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob,
                               convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea])
        from checkpoint_writes cw
        where cw.thread_id = {thread}
            and cw.checkpoint_ns = checkpoints.checkpoint_ns
            and cw.checkpoint_id = checkpoints.checkpoint_id
    ) as pending_writes
from checkpoints
"""


_CHECKPOINT_OF_THREAD = _checkpoint_select("%(thread)s")
_CHECKPOINT_OF_ANY_THREAD = _checkpoint_select("checkpoints.thread_id")
_NEWEST_CHECKPOINT = (
    _CHECKPOINT_OF_THREAD
    + "where thread_id = %(thread)s and checkpoint_ns = %(ns)s order by checkpoint_id desc limit 1"
)
_CHECKPOINT_BY_ID = (
    _CHECKPOINT_OF_THREAD + "where thread_id = %(thread)s and checkpoint_ns = %(ns)s and checkpoint_id = %(id)s"
)


async def send_checkpoint_row(cur: Cursor, thread_id: ThreadId, checkpoint_ns: str, checkpoint_id: str | None) -> None:
    """Send `checkpoint_row`'s statement without fetching (in a pipeline: it comes back with the flush)."""
    params = {"thread": thread_id, "ns": checkpoint_ns, "id": checkpoint_id}
    await cur.execute(_CHECKPOINT_BY_ID if checkpoint_id else _NEWEST_CHECKPOINT, params, binary=True)


async def checkpoint_row(cur: Cursor, thread_id: ThreadId, checkpoint_ns: str, checkpoint_id: str | None) -> Any:
    """Return the saver's row of one checkpoint (the newest without `checkpoint_id`), None when absent.

    The row is the library's get-checkpoint row (for `_load_checkpoint_tuple`); `cur` is the
    saver's binary dict-row cursor.
    """
    await send_checkpoint_row(cur, thread_id, checkpoint_ns, checkpoint_id)
    return await cur.fetchone()


async def checkpoint_rows(
    cur: Cursor,
    thread_id: ThreadId | None,
    *,
    checkpoint_ns: str | None,
    checkpoint_id: str | None,
    metadata: Any,
    before: str | None,
    limit: int | None,
) -> list[Any]:
    """Return the saver's rows of the checkpoints matching `alist`'s arguments, newest first.

    `thread_id` None lists every thread (a multi-shard statement on Citus); `metadata` is a
    `Jsonb` the metadata must contain, or None.
    """
    wheres = []
    params: dict[str, str | int | None] = {"thread": thread_id, "ns": checkpoint_ns, "id": checkpoint_id}
    if thread_id is not None:
        wheres.append("thread_id = %(thread)s")
        if checkpoint_ns is not None:
            wheres.append("checkpoint_ns = %(ns)s")
        if checkpoint_id:
            wheres.append("checkpoint_id = %(id)s")
    if metadata is not None:
        wheres.append("metadata @> %(metadata)s")
        params["metadata"] = metadata
    if before is not None:
        wheres.append("checkpoint_id < %(before)s")
        params["before"] = before
    query = _CHECKPOINT_OF_THREAD if thread_id is not None else _CHECKPOINT_OF_ANY_THREAD
    if wheres:
        query += "where " + " and ".join(wheres) + " "
    query += "order by checkpoint_id desc"
    if limit is not None:
        query += " limit %(limit)s"
        params["limit"] = int(limit)
    await cur.execute(query, params, binary=True)
    return list(await cur.fetchall())


def _delta_walk_page(channels: int, *, include_cursor: bool, cursor: str = "%(cursor)s") -> str:
    # The library's stage-1 walk (`_build_delta_stage1_sql`, its columns ver_i, hb_i,
    # inline_i), the blob probe naming the thread by the parameter.
    columns = "".join(
        f"""
    checkpoint -> 'channel_versions' ->> %(ch{i})s as ver_{i},
    exists (
        select 1 from checkpoint_blobs b{i}
        where b{i}.thread_id = %(thread)s and b{i}.checkpoint_ns = checkpoints.checkpoint_ns
            and b{i}.channel = %(ch{i})s and b{i}.version = checkpoint -> 'channel_versions' ->> %(ch{i})s
            and b{i}.type <> 'empty'
    ) as hb_{i},
    checkpoint -> 'channel_values' -> %(ch{i})s as inline_{i},"""
        for i in range(channels)
    )
    bound = "<=" if include_cursor else "<"
    return (
        f"select{columns}\n    checkpoint_id, parent_checkpoint_id\nfrom checkpoints\n"
        f"where thread_id = %(thread)s and checkpoint_ns = %(ns)s and checkpoint_id {bound} {cursor}\n"
        "order by checkpoint_id desc limit %(page)s"
    )


async def delta_walk_page(
    cur: Cursor,
    thread_id: ThreadId,
    checkpoint_ns: str,
    channels: Sequence[str],
    *,
    cursor: str,
    include_cursor: bool,
    page: int,
) -> list[Any]:
    """Return one page of the delta-channel walk from `cursor` down, newest first (the library's stage-1 rows)."""
    params: dict[str, str | int] = {"thread": thread_id, "ns": checkpoint_ns, "cursor": cursor, "page": page}
    params.update({f"ch{i}": channel for i, channel in enumerate(channels)})
    await cur.execute(_delta_walk_page(len(channels), include_cursor=include_cursor), params)
    return list(await cur.fetchall())


# The walk's first page from the thread's newest checkpoint, named by a subquery of its own
# thread: sent beside the checkpoint's read, before its id is known.
_NEWEST_ID = (
    "(select checkpoint_id from checkpoints where thread_id = %(thread)s and checkpoint_ns = %(ns)s"
    " order by checkpoint_id desc limit 1)"
)


async def send_first_walk_page(
    cur: Cursor,
    thread_id: ThreadId,
    checkpoint_ns: str,
    channels: Sequence[str],
    *,
    checkpoint_id: str | None,
    page: int,
) -> None:
    """Send, without fetching, `delta_walk_page`'s first page from `checkpoint_id` (the newest when None).

    In a pipeline it goes out with the checkpoint's own read: one round trip for both.
    """
    params: dict[str, str | int] = {"thread": thread_id, "ns": checkpoint_ns, "page": page}
    params.update({f"ch{i}": channel for i, channel in enumerate(channels)})
    if checkpoint_id:
        params["cursor"] = checkpoint_id
        await cur.execute(_delta_walk_page(len(channels), include_cursor=True), params)
    else:
        await cur.execute(_delta_walk_page(len(channels), include_cursor=True, cursor=_NEWEST_ID), params)


# The library's stage 2 (`_build_delta_stage2_sql`): per channel, its writes on the walk's
# checkpoints and its seed blob, one branch each, every branch naming the thread.
_DELTA_WRITES = (
    "select 'w'::text as _kind, checkpoint_id, channel, type, blob, task_id, task_path, idx, null::text as version "
    "from checkpoint_writes "
    "where thread_id = %(thread)s and checkpoint_ns = %(ns)s and channel = %(wch{i})s "
    "and checkpoint_id = any(%(wcids{i})s)"
)
_DELTA_SEED = (
    "select 'b'::text as _kind, null::text as checkpoint_id, channel, type, blob, null::text as task_id, "
    "null::text as task_path, null::int as idx, version "
    "from checkpoint_blobs "
    "where thread_id = %(thread)s and checkpoint_ns = %(ns)s and channel = %(bch{i})s and version = %(bver{i})s"
)


async def send_delta_writes_and_seeds(
    cur: Cursor,
    thread_id: ThreadId,
    checkpoint_ns: str,
    *,
    chains: Sequence[tuple[str, list[str]]],
    seeds: Sequence[tuple[str, str | None]],
) -> bool:
    """Send, without fetching, the read of each (channel, checkpoint ids)'s writes and each (channel, version)'s blob.

    The library's stage-2 rows, for `_build_delta_channels_writes_history`; False (nothing
    sent) when there is nothing to read. In a pipeline it goes out with the statements
    around it: one round trip for all.
    """
    branches = [_DELTA_WRITES.format(i=i) for i in range(len(chains))]
    branches += [_DELTA_SEED.format(i=i) for i in range(len(seeds))]
    if not branches:
        return False
    params: dict[str, str | list[str] | None] = {"thread": thread_id, "ns": checkpoint_ns}
    for i, (channel, ids) in enumerate(chains):
        params[f"wch{i}"], params[f"wcids{i}"] = channel, ids
    for i, (channel, seed_version) in enumerate(seeds):
        params[f"bch{i}"], params[f"bver{i}"] = channel, seed_version
    await cur.execute(" union all ".join(branches), params)
    return True


# --- Channel versions (transcript, run records, rejoins) ---------------------------------
# Raw: `aget_tuple` loads a checkpoint with every channel at its version; the transcript is
# every *version* of the `turn` channel (the API has no per-channel history outside
# DeltaChannels), and a record or a rejoin needs one or two channels of one checkpoint.
# Rows are (version, type, blob) as the saver wrote them; db/checkpoints.py decodes them.


class BlobRow(TypedDict):
    """A stored value as the saver wrote it: its serializer's type tag and bytes."""

    type: str | None
    blob: bytes | None


class VersionRow(BlobRow):
    """One version of a channel and its value."""

    version: str


class ChannelRow(BlobRow):
    """A channel's value at the version asked for."""

    channel: str


# Newest first, a batch at a time: the newest page costs the same at turn 1000 as at 10.
# "C" collation: versions compare by their fixed-width counter whatever the database's.
_TURN_VERSIONS_BEFORE = (
    "select version, type, blob from checkpoint_blobs "
    "where thread_id = %s and checkpoint_ns = '' and channel = 'turn' and version collate \"C\" < %s "
    'order by version collate "C" desc limit %s'
)
_MEMORY_BLOBS = """
select channel, type, blob from checkpoint_blobs
where thread_id = %s and checkpoint_ns = ''
  and ((channel = 'profile' and version = %s) or (channel = 'facts' and version = %s))
"""
_BLOB = (
    "select type, blob from checkpoint_blobs "
    "where thread_id = %s and checkpoint_ns = '' and channel = %s and version = %s"
)
# A failed run's `__error__` pending write (durability "exit" saves it with the final checkpoint).
_ERROR = (
    "select type, blob from checkpoint_writes "
    "where thread_id = %s and checkpoint_ns = '' and checkpoint_id = %s and channel = '__error__' limit 1"
)


async def turn_versions_before(conn: Conn, thread_id: ThreadId, bound: str, limit: int) -> list[VersionRow]:
    """Return up to `limit` versions of the thread's `turn` channel sorting below `bound`, newest first."""
    return await fetch_all(conn, VersionRow, _TURN_VERSIONS_BEFORE, (thread_id, bound, limit))


async def memory_blobs(
    conn: Conn, thread_id: ThreadId, profile_version: object, facts_version: object
) -> list[ChannelRow]:
    """Return the `profile` and `facts` channel rows at the given versions (channel, type, blob)."""
    return await fetch_all(conn, ChannelRow, _MEMORY_BLOBS, (thread_id, profile_version, facts_version))


async def channel_blob(conn: Conn, thread_id: ThreadId, channel: str, version: object) -> BlobRow | None:
    """Return one channel version's row (type, blob), None when absent."""
    return await fetch_one(conn, BlobRow, _BLOB, (thread_id, channel, version))


async def error_write(conn: Conn, thread_id: ThreadId, checkpoint_id: str) -> BlobRow | None:
    """Return the `__error__` pending write saved with a checkpoint (type, blob), None when the run did not fail."""
    return await fetch_one(conn, BlobRow, _ERROR, (thread_id, checkpoint_id))


# --- Runs' checkpoints (run records, rejoins) --------------------------------------------
# Raw: a run is found by the `run_id` in checkpoint metadata, and the record, the summary and
# the channel versions are read from the checkpoint's JSONB (strings are stored inline) without
# loading any blob.


class RecordCheckpointRow(TypedDict):
    """A run's checkpoint as its record is read: the record and summary strings, the versions."""

    checkpoint_id: str
    record: str | None
    summary: str | None
    versions: dict[str, str] | None
    ts: str


class RunCheckpointRow(TypedDict):
    """A run's checkpoint: who wrote it (`source` of the metadata) and its channel versions."""

    checkpoint_id: str
    source: str | None
    versions: dict[str, str] | None


_RUN_RECORD_CHECKPOINTS = """
select checkpoint_id,
       checkpoint -> 'channel_values' ->> 'record' as record,
       checkpoint -> 'channel_values' ->> 'summary' as summary,
       checkpoint -> 'channel_versions' as versions,
       checkpoint ->> 'ts' as ts
from checkpoints
where thread_id = %s and checkpoint_ns = '' and metadata ->> 'run_id' = %s and metadata ->> 'tenant_id' = %s
order by checkpoint_id desc
"""
_RUN_CHECKPOINTS = """
select checkpoint_id, metadata ->> 'source' as source, checkpoint -> 'channel_versions' as versions
from checkpoints
where thread_id = %s and checkpoint_ns = '' and metadata ->> 'run_id' = %s
order by checkpoint_id
"""
_NEWEST_RUN = (
    "select metadata ->> 'run_id' as run_id from checkpoints "
    "where thread_id = %s and checkpoint_ns = '' order by checkpoint_id desc limit 1"
)


async def run_record_checkpoints(
    conn: Conn, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId
) -> list[RecordCheckpointRow]:
    """Return the run's checkpoints newest first: checkpoint_id, record, summary, versions, ts."""
    return await fetch_all(conn, RecordCheckpointRow, _RUN_RECORD_CHECKPOINTS, (thread_id, run_id, tenant_id))


async def run_checkpoints(conn: Conn, thread_id: ThreadId, run_id: RunId) -> list[RunCheckpointRow]:
    """Return the run's checkpoints oldest first: checkpoint_id, source, versions."""
    return await fetch_all(conn, RunCheckpointRow, _RUN_CHECKPOINTS, (thread_id, run_id))


async def newest_run(conn: Conn, thread_id: ThreadId) -> str | None:
    """Return the run id of the thread's newest checkpoint, None without one."""
    row = await (await conn.execute(_NEWEST_RUN, (thread_id,))).fetchone()
    return None if row is None else row["run_id"]


# Raw, and a fragment rather than a function: pruning chunk versions (retrieval/versions.py)
# needs every cited (tenant, chunk, version) pair in the same statement as its delete, one
# scan of the root checkpoints. A record is a JSON string the saver stores inline in the
# checkpoint's JSONB (agent/record.py); `retrieved` is a list of [chunk_id, version].
# A new run's first checkpoint holds an empty record: only JSON objects are parsed.
CITED_CHUNK_VERSIONS = """
select distinct records.tenant_id, r ->> 0 as chunk_id, (r ->> 1)::int as version
from (
    select k.metadata ->> 'tenant_id' as tenant_id, k.checkpoint -> 'channel_values' ->> 'record' as raw
    from checkpoints k
    where k.checkpoint_ns = '' and k.checkpoint -> 'channel_values' ->> 'record' like '{%%'
) as records
cross join lateral jsonb_array_elements(coalesce(raw::jsonb -> 'retrieved', '[]'::jsonb)) as r
"""


# --- Deleting --------------------------------------------------------------------------


async def delete_thread_checkpoints(conn: Conn, thread_ids: Sequence[str]) -> None:
    """Delete the threads' checkpoints, blobs and writes with the saver's `adelete_thread`, on `conn`.

    A saver on the caller's connection, so the deletes join the caller's transaction (the
    pooled saver would take a connection, and a transaction, of its own). One pipelined
    round trip per thread. `aprune(strategy="delete")` would take every thread at once, but
    on a connection of its own, and its name is what tests/threads/test_record_keeping.py
    forbids. Other tables keyed by `thread_id` are the caller's: see threads/deletion.py.
    """
    saver = AsyncPostgresSaver(conn)
    for thread_id in thread_ids:
        await saver.adelete_thread(thread_id)


async def delete_store_namespaces(conn: Conn, namespaces: Sequence[tuple[str, ...]]) -> int:
    """Delete every store item in exactly these namespaces; return how many went.

    Raw: the store has no delete by namespace, and `asearch` + `adelete` would need a page
    loop and, with `omit_expired`, would skip items expired but not yet swept, which must go
    too. One statement, in the caller's transaction (memory/resets.py counts on it).
    Vectors, if any, go with their items (`store_vectors` cascades).
    """
    prefixes = [_prefix(ns) for ns in namespaces]
    cur = await conn.execute("delete from store where prefix = any(%s)", (prefixes,))
    return max(cur.rowcount, 0)


# Items of one prefix whose value matches an SQL/JSON path, and a value rewritten in place:
# the memory feature's walk that takes a deleted thread out of what it stored
# (memory/thread_deletion.py) reads and rewrites with these, knowing the values' shape itself.
# One prefix by equality per statement, each rewrite by (prefix, key): router statements on
# a store distributed by prefix.
_ITEMS_MATCHING = """
select key, value, created_at, updated_at from store
where prefix = %s and jsonb_path_exists(value, %s::jsonpath, %s)
"""
_SET_VALUE = "update store set value = %s where prefix = %s and key = %s"


async def store_items_matching(
    conn: Conn, prefix: str, json_path: str, variables: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Return the rows of exactly `prefix` (expired ones too) whose value matches `json_path` with `variables`."""
    cur = await conn.execute(_ITEMS_MATCHING, (prefix, json_path, Jsonb(dict(variables))))
    return list(await cur.fetchall())


async def set_store_value(conn: Conn, prefix: str, key: str, value: Mapping[str, Any]) -> None:
    """Replace one row's value, leaving its timestamps and expiry as they were."""
    await conn.execute(_SET_VALUE, (Jsonb(dict(value)), prefix, key))


# --- Memory items: the store's rows by statements of our own --------------------------------
# Raw: the store's own SQL reads a namespace with `prefix = $1 OR prefix LIKE $2` inside a CTE
# whose TTL refresh feeds a column to `NOW() + ... ::interval`, and upserts with
# `updated_at = CURRENT_TIMESTAMP` in `DO UPDATE SET`; a store distributed by `prefix` (Citus)
# refuses all three. Each statement here names one prefix by equality, and every moment is a
# parameter (memory/items.py passes the replica's clock). The rows keep the store's layout,
# so the store's TTL sweeper still deletes expired items.

_ITEMS = """
select key, value, created_at, updated_at from store
where prefix = %(prefix)s and (expires_at is null or expires_at > %(visible_after)s)
order by updated_at desc limit %(limit)s
"""
_ITEM = """
select key, value, created_at, updated_at from store
where prefix = %(prefix)s and key = %(key)s and (expires_at is null or expires_at > %(visible_after)s)
"""
# Items written while no TTL was set carry none until they are next written (the store's rule).
_REFRESH_ITEMS = """
update store set expires_at = %(expires_at)s
where prefix = %(prefix)s and ttl_minutes is not null and (expires_at is null or expires_at > %(now)s)
"""
_UPSERT_ITEM = """
insert into store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes)
values (%(prefix)s, %(key)s, %(value)s, %(now)s, %(now)s, %(expires_at)s, %(ttl_minutes)s)
on conflict (prefix, key) do update
set value = excluded.value, updated_at = excluded.updated_at,
    expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes
"""


async def store_items(conn: Conn, prefix: str, visible_after: datetime, limit: int) -> list[dict[str, Any]]:
    """Return up to `limit` rows of exactly `prefix` expiring after `visible_after`, newest first."""
    params = {"prefix": prefix, "visible_after": visible_after, "limit": limit}
    return list(await (await conn.execute(_ITEMS, params)).fetchall())


async def send_store_read(
    conn: Conn, prefix: str, visible_after: datetime, *, key: str | None = None, limit: int = 1
) -> Cursor:
    """Send one read of `prefix` (the row of `key`, or up to `limit` rows newest first); return its cursor.

    In a pipeline the read goes out without waiting: several reads sent this way come back
    in the round trip of the first fetch.
    """
    if key is None:
        return await conn.execute(_ITEMS, {"prefix": prefix, "visible_after": visible_after, "limit": limit})
    return await conn.execute(_ITEM, {"prefix": prefix, "key": key, "visible_after": visible_after})


async def store_item(conn: Conn, prefix: str, key: str, visible_after: datetime) -> dict[str, Any] | None:
    """Return one row (key, value, created_at, updated_at), None when absent or expired by `visible_after`."""
    params = {"prefix": prefix, "key": key, "visible_after": visible_after}
    return await (await conn.execute(_ITEM, params)).fetchone()


async def refresh_store_items(conn: Conn, prefix: str, expires_at: datetime, now: datetime) -> None:
    """Set the expiry of the prefix's unexpired rows that carry a TTL."""
    await conn.execute(_REFRESH_ITEMS, {"prefix": prefix, "expires_at": expires_at, "now": now})


async def upsert_store_items(
    conn: Conn,
    prefix: str,
    values: Sequence[tuple[str, dict[str, Any]]],
    *,
    now: datetime,
    expires_at: datetime | None,
    ttl_minutes: float | None,
) -> None:
    """Insert or replace rows (key, value) of `prefix`, all stamped `now`."""
    rows = [
        {
            "prefix": prefix,
            "key": key,
            "value": Jsonb(value),
            "now": now,
            "expires_at": expires_at,
            "ttl_minutes": ttl_minutes,
        }
        for key, value in values
    ]
    async with conn.cursor() as cur:
        await cur.executemany(_UPSERT_ITEM, rows)


async def delete_store_keys(conn: Conn, prefix: str, keys: Sequence[str]) -> int:
    """Delete these keys of exactly `prefix`; return how many rows went."""
    cur = await conn.execute("delete from store where prefix = %s and key = any(%s)", (prefix, list(keys)))
    return max(cur.rowcount, 0)


async def delete_store_prefix(conn: Conn, prefix: str) -> int:
    """Delete every row of exactly `prefix`, expired ones too; return how many went."""
    cur = await conn.execute("delete from store where prefix = %s", (prefix,))
    return max(cur.rowcount, 0)


async def delete_store_tree(conn: Conn, namespace: tuple[str, ...]) -> int:
    """Delete every row under `namespace` (itself and all namespaces below it) from every table keyed by `prefix`.

    Tables come from the catalogue (db/catalogue.py), not a list, so a table a later store
    version adds keyed the same way is emptied too (erasure must leave nothing). Returns how
    many `store` items went. Raw for the reasons of `delete_store_namespaces`.
    """
    root = _prefix(namespace)
    items = 0
    # Store first: `store_vectors` rows cascade from it; any other table is swept after.
    for table in sorted(await tables_with_column(conn, "prefix"), key=lambda t: t != STORE_TABLE):
        cur = await conn.execute(
            # `starts_with`, not LIKE: labels may contain `_`, a LIKE wildcard. It uses the store's
            # prefix index (text_pattern_ops) as LIKE would (Postgres 18, checked with EXPLAIN).
            sql.SQL("delete from {} where prefix = %s or starts_with(prefix, %s)").format(sql.Identifier(table)),
            (root, root + "."),
        )
        if table == STORE_TABLE:
            items = max(cur.rowcount, 0)
    return items


def _prefix(namespace: tuple[str, ...]) -> str:
    # The store keeps a namespace as its labels joined by "."; labels cannot contain one
    # (the store refuses them, and the service's ids exclude it).
    return ".".join(namespace)
