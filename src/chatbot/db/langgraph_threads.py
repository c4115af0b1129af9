"""Threads as LangGraph's checkpoints show them: who owns one, which runs it holds, which are idle, deleting one.

One of the `db/langgraph_*.py` modules, the only ones naming the library's tables (db/langgraph_tables.py
says why and holds the version they were checked on).
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from chatbot.db.connection_options import Conn
from chatbot.ids import RunId, TenantId, ThreadId, UserId

CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
"""The saver's tables keyed by thread; `adelete_thread` of the verified versions empties all three."""


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


async def threads_with_checkpoints(conn: Conn, thread_ids: Sequence[ThreadId]) -> set[ThreadId]:
    """Return those of `thread_ids` that have a checkpoint (the others exist only in rows left of them)."""
    rows = await (await conn.execute(_WITH_CHECKPOINTS, (list(thread_ids),))).fetchall()
    return {ThreadId(r["thread_id"]) for r in rows}


async def stale_threads(conn: Conn, after: str, floor: str, limit: int) -> list[ThreadId]:
    """Return up to `limit` threads after `after` (by id) whose newest checkpoint id is below `floor`."""
    rows = await (await conn.execute(_STALE, (after, floor, limit))).fetchall()
    return [ThreadId(r["thread_id"]) for r in rows]


async def still_stale(conn: Conn, thread_ids: Sequence[ThreadId], floor: str) -> list[ThreadId]:
    """Return those of `thread_ids` whose newest checkpoint id is still below `floor`."""
    rows = await (await conn.execute(_STILL_STALE, (list(thread_ids), floor))).fetchall()
    return [ThreadId(r["thread_id"]) for r in rows]


# --- Deleting --------------------------------------------------------------------------


async def delete_thread_checkpoints(conn: Conn, thread_ids: Sequence[ThreadId]) -> None:
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
