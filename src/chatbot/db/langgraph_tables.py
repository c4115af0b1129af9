"""Statements on the tables LangGraph's libraries own, checked against one version: the checkpoints' reads here.

langgraph-checkpoint-postgres creates and owns `checkpoints`, `checkpoint_blobs`,
`checkpoint_writes` and `checkpoint_migrations` (the saver) and `store`, `store_vectors`,
`store_migrations` and `vector_migrations` (the store; the vector tables exist only with an
index configuration, which this service does not use). Their shape can change with any
minor release, so nothing outside `db/langgraph_*.py` names them: features call the
functions of these modules, and upgrading the library means re-checking them (and
`db/saver.py`) only. This one holds the version check and the reads of checkpoints, their
channels and their runs (the saver's and db/checkpoints.py's); `langgraph_threads.py` who a
thread belongs to, which threads are idle, and deleting a thread's checkpoints;
`langgraph_store.py` the store's rows; `langgraph_schema.py` whether the tables are migrated.

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
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any, TypedDict

import typing_extensions
from pydantic import TypeAdapter

from chatbot.db.connection_options import Conn, Cursor
from chatbot.db.rows import fetch_all, fetch_one
from chatbot.ids import RunId, TenantId, ThreadId

PACKAGE = "langgraph-checkpoint-postgres"
VERIFIED_VERSIONS = ((3, 2, 0), (3, 3, 0))
"""The langgraph-checkpoint-postgres versions (low inclusive, high exclusive) the `db/langgraph_*.py`
modules and `db/saver.py` were checked against: the statements' columns there, the saver's patches.
Patch releases of the line are accepted because tests/db/test_saver.py and
tests/db/test_langgraph_tables.py re-check the source, the columns and the concurrency on
whatever is installed; a new minor must be re-verified."""


def installed_version() -> tuple[int, int, int]:
    """Return the installed langgraph-checkpoint-postgres version as (major, minor, patch)."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version(PACKAGE))
    if found is None:
        raise RuntimeError(f"cannot read the version of {PACKAGE}: {version(PACKAGE)!r}")
    return int(found[1]), int(found[2]), int(found[3] or 0)


Bounds = tuple[tuple[int, int, int], tuple[int, int, int]]


def refuse_unless_verified(verified: Bounds, *, who: str, advice: str) -> None:
    """Raise unless the installed langgraph-checkpoint-postgres is within `verified` (low inclusive, high exclusive).

    `who` names what was verified ("chatbot.db.saver was checked"), `advice` what
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
    """Raise unless the installed langgraph-checkpoint-postgres is within `VERIFIED_VERSIONS`."""
    refuse_unless_verified(
        VERIFIED_VERSIONS,
        who="the chatbot.db.langgraph_* modules and chatbot.db.saver were checked",
        advice="re-run tests/db/test_langgraph_tables.py, tests/db/test_saver.py, the erasure, transcript "
        "and record tests and bench/runs.py, then widen VERIFIED_VERSIONS (or use AsyncPostgresSaver if "
        "the library no longer locks pooled savers)",
    )


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


def _checkpoint_select(thread_sql: str) -> str:
    # `thread_sql`: the thread the subqueries name: the parameter, or (listing every thread, rare
    # and multi-shard anyway) the outer row's column.
    return f"""
select thread_id, checkpoint, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata,
    (
        select array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob])
        from checkpoint_blobs bl
        where bl.thread_id = {thread_sql}
            and bl.checkpoint_ns = checkpoints.checkpoint_ns
            and (bl.channel, bl.version) in (
                select key, value from jsonb_each_text(checkpoints.checkpoint -> 'channel_versions')
            )
    ) as channel_values,
    (
        select array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob,
                               convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea])
        from checkpoint_writes cw
        where cw.thread_id = {thread_sql}
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


# typing_extensions' TypedDict: the one pydantic validates on Python 3.11. The channel versions
# are JSON the library wrote: validated as they are read, like every stored JSON we read.
class RecordCheckpointRow(typing_extensions.TypedDict):
    """A run's checkpoint as its record is read: the record and summary strings, the versions."""

    checkpoint_id: str
    record: str | None
    summary: str | None
    versions: dict[str, str] | None
    ts: str


class RunCheckpointRow(typing_extensions.TypedDict):
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
_RECORD_CHECKPOINT_ROWS: TypeAdapter[list[RecordCheckpointRow]] = TypeAdapter(list[RecordCheckpointRow])
_RUN_CHECKPOINT_ROWS: TypeAdapter[list[RunCheckpointRow]] = TypeAdapter(list[RunCheckpointRow])
_NEWEST_RUN = (
    "select metadata ->> 'run_id' as run_id from checkpoints "
    "where thread_id = %s and checkpoint_ns = '' order by checkpoint_id desc limit 1"
)


async def run_record_checkpoints(
    conn: Conn, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId
) -> list[RecordCheckpointRow]:
    """Return the run's checkpoints newest first: checkpoint_id, record, summary, versions, ts."""
    rows = await fetch_all(conn, RecordCheckpointRow, _RUN_RECORD_CHECKPOINTS, (thread_id, run_id, tenant_id))
    return _RECORD_CHECKPOINT_ROWS.validate_python(rows)


async def run_checkpoints(conn: Conn, thread_id: ThreadId, run_id: RunId) -> list[RunCheckpointRow]:
    """Return the run's checkpoints oldest first: checkpoint_id, source, versions."""
    return _RUN_CHECKPOINT_ROWS.validate_python(
        await fetch_all(conn, RunCheckpointRow, _RUN_CHECKPOINTS, (thread_id, run_id))
    )


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
