"""Deleting threads: everything kept of a thread, in every table keyed by its id.

A thread's checkpoints, blobs and writes go through the saver's own `adelete_thread`
(db/langgraph_threads.py); then every other table the catalogue shows with a `thread_id`
column (feedback, the thread's lock fence, and whatever a later library version or
migration adds) loses the thread's rows, in the same transaction. The owner's facts stay
(memory is the user's), but those whose `source` names the thread lose that source. Callers hold the threads'
locks, so no run writes meanwhile (threads/router.py, ops/).

A thread is found by its checkpoints, and also by recall's rows (recall/leftovers.py),
which name the thread and its owner: rows a run wrote after losing its lock, before recall's
writes passed the thread's fence, outlived their thread's checkpoints, and are still found by
the owner's DELETE, the owner's erasure and retention.

Unknown tables are cleaned rather than refused: in this database a `thread_id` can only
name one of the backend's chat sessions (there is no mapping table), so its rows
are the thread's, and deletion, retention and erasure promise that nothing of the thread is
left. Refusing instead would turn a library upgrade into failing erasures in production.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from chatbot.caller import CallerContext
from chatbot.db import catalogue, langgraph_threads
from chatbot.db.locks import Fence, Locks, forget_fence
from chatbot.db.pool import Pool
from chatbot.db.transaction_locks import hold_threads_rows
from chatbot.errors import DATABASE_ERRORS, Problem
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.memory.thread_deletion import drop_thread_sources
from chatbot.recall.leftovers import forget_index, index_owner, threads_indexed_for
from chatbot.threads import queries
from chatbot.threads._ownership import Owner, belongs_to_another

log = logging.getLogger(__name__)


async def delete_thread_rows(conn: AsyncConnection[Any], thread_ids: Sequence[ThreadId]) -> None:
    """Delete every row of the threads, on `conn` (in the caller's transaction)."""
    if not thread_ids:
        return
    # First: a rating being written on one of the threads is waited for, then deleted too.
    await hold_threads_rows(conn, list(thread_ids))
    owners = {thread_id: await langgraph_threads.first_checkpoint_owner(conn, thread_id) for thread_id in thread_ids}
    await langgraph_threads.delete_thread_checkpoints(conn, thread_ids)
    await catalogue.delete_keyed(conn, "thread_id", thread_ids, skip=langgraph_threads.CHECKPOINT_TABLES)
    # Last: the thread's memory jobs are gone above, so no job of it writes a source again
    # (a job already writing took its row first, and this waited for it).
    for thread_id, owner in owners.items():
        if owner is not None:
            await drop_thread_sources(conn, *owner, thread_id)


async def user_threads(pool: Pool, tenant_id: TenantId, user_id: UserId) -> list[ThreadId]:
    """Return every thread naming the user: by its checkpoints, or by recall rows indexed for them."""
    async with pool.connection() as conn:
        found = await langgraph_threads.threads_of_user(conn, tenant_id, user_id)
        indexed = await threads_indexed_for(conn, tenant_id, user_id)
    # Checkpoints name their threads as plain text (db/langgraph_tables.py): typed here, where they are read.
    return sorted({ThreadId(thread_id) for thread_id in found} | set(indexed))


@dataclass(frozen=True, slots=True)
class UserThreadsDeleted:
    """What deleting a user's threads removed: threads (wholly), and ratings."""

    threads: int
    feedback: int


async def delete_user_threads(
    conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId, thread_ids: Sequence[ThreadId]
) -> UserThreadsDeleted:
    """Delete the user's threads, their feedback and the user's run counters, on `conn` (an erasure's transaction).

    Ratings go: the user's anywhere in the tenant, and any on the threads. A thread id of
    `thread_ids` whose checkpoints another caller wrote (it was given again after the user's
    thread went) loses only its recall index, which held the user's turns; its next run
    indexes it again from its own transcript.
    """
    # Before the feedback is read: a rating being written on a thread is waited for.
    await hold_threads_rows(conn, list(thread_ids))
    others = []
    for thread_id in thread_ids:
        owner = await langgraph_threads.first_checkpoint_owner(conn, thread_id)
        if owner is not None and owner != (tenant_id, user_id):
            others.append(thread_id)
    theirs = [t for t in thread_ids if t not in others]
    # Counted before the threads go: feedback on them is deleted with them too.
    feedback = await queries.delete_feedback_of_user(conn, tenant_id, user_id, theirs)
    await delete_thread_rows(conn, theirs)
    await forget_index(conn, others)
    await queries.forget_user_counts(conn, tenant_id, user_id)
    return UserThreadsDeleted(threads=len(theirs), feedback=feedback)


async def delete_threads(pool: Pool, thread_ids: Sequence[ThreadId]) -> int:
    """Delete every checkpoint, blob and write of the threads, their feedback, everything, at once."""
    if not thread_ids:
        return 0
    ids = list(thread_ids)
    async with pool.connection() as conn, conn.transaction():
        await delete_thread_rows(conn, ids)
    return len(ids)


async def rows_owner(pool: Pool, thread_id: ThreadId) -> Owner | None:
    """Return whose the thread's rows are: its first checkpoint's writer, else its recall rows' owner.

    Both read every time, on one connection: a thread of another caller and one that does
    not exist cost the same.
    """
    async with pool.connection() as conn:
        written = await langgraph_threads.first_checkpoint_owner(conn, thread_id)
        indexed = await index_owner(conn, thread_id)
    found = written or indexed
    return None if found is None else Owner(*found)


async def delete_callers_thread(pool: Pool, locks: Locks, thread_id: ThreadId, caller: CallerContext) -> None:
    """Delete the caller's thread under its lock; nothing when it is not the caller's; 409 while a run holds it.

    A thread without checkpoints whose recall rows are the caller's (left by a run that lost
    its lock) is the caller's too: its rows go.
    """
    owner = await rows_owner(pool, thread_id)
    if owner is None or belongs_to_another(owner, caller):
        # Nothing of the caller's to delete. Another caller's thread and a thread that does not
        # exist end here alike, after the same two reads and without the thread's lock:
        # neither the answer nor its timing tells them apart (docs/measurements/reliability.md), and another caller's
        # refused request never makes the owner's runs meet a 409. A first run that holds the
        # lock but has not written yet is a thread that does not exist yet: 204 (docs/api.md).
        return
    lease = await locks.try_thread(thread_id)
    if lease is None:
        raise Problem(409, "a run is in flight on this thread")
    try:
        # Again under the lock: the thread may have been deleted and begun again by another caller since.
        if not belongs_to_another(await rows_owner(pool, thread_id), caller):
            await delete_threads(pool, [thread_id])
    finally:
        await lease.release()


async def forget_unwritten_thread(pool: Pool, fence: Fence | None) -> None:
    """Delete the fence row a refused first run's lock set, the only row of a thread id never written.

    Called by the lock's holder before it releases the lock (threads/runs.py): the token
    condition makes sure only that holder's row goes. Best effort: when the database fails
    here too, the row stays until the thread id is used and deleted (what every refusal
    left before).
    """
    if fence is None:
        return
    try:
        async with pool.connection() as conn:
            await forget_fence(conn, ThreadId(fence.thread_id), fence.token)
    except DATABASE_ERRORS as exc:
        extra = {"thread_id": fence.thread_id, "error": type(exc).__name__}
        log.warning("fence row of a refused first run not deleted", extra=extra)
