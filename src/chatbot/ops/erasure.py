"""Deleting threads and erasing a user: the shared mechanics of DELETE, erasure and retention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from chatbot.db.pool import Pool
from chatbot.memory.namespaces import facts_namespace, profile_namespace
from chatbot.memory.resets import forget_resets
from chatbot.retrieval.versions import prune_superseded_chunks
from chatbot.threads.locks import Lease, Locks

_CHECKPOINT_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints")


def _store_prefix(namespace: tuple[str, ...]) -> str:
    # The store keeps a namespace as its labels joined by "."; ids never contain one.
    return ".".join(namespace)


async def _delete_thread_rows(conn: AsyncConnection[Any], thread_ids: list[str]) -> None:
    for table in _CHECKPOINT_TABLES:
        await conn.execute(f"delete from {table} where thread_id = any(%s)", (thread_ids,))


async def delete_threads(pool: Pool, thread_ids: Sequence[str]) -> int:
    """Delete every checkpoint, blob and write of the threads, and their feedback, at once."""
    if not thread_ids:
        return 0
    ids = list(thread_ids)
    async with pool.connection() as conn, conn.transaction():
        await _delete_thread_rows(conn, ids)
        await conn.execute("delete from run_feedback where thread_id = any(%s)", (ids,))
    return len(ids)


async def delete_memory(pool: Pool, tenant_id: str, user_id: str) -> int:
    """Delete the user's profile and facts in one tenant; return how many items went."""
    prefixes = [
        _store_prefix(profile_namespace(tenant_id, user_id)),
        _store_prefix(facts_namespace(tenant_id, user_id)),
    ]
    async with pool.connection() as conn:
        cur = await conn.execute("delete from store where prefix = any(%s)", (prefixes,))
        return cur.rowcount


@dataclass(frozen=True, slots=True)
class ErasureReport:
    """What an erasure removed."""

    threads_deleted: int
    memory_items_deleted: int
    feedback_deleted: int


class ErasureBusy(Exception):
    """A run stayed in flight on one of the user's threads past the bounded wait."""


_USER_THREADS = (
    "select distinct thread_id from checkpoints where checkpoint_ns = '' "
    "and metadata ->> 'tenant_id' = %s and metadata ->> 'user_id' = %s"
)


async def erase_user(pool: Pool, locks: Locks, tenant_id: str, user_id: str, *, wait: float = 10.0) -> ErasureReport:
    """Remove the user's threads, memory, feedback and counters in one tenant.

    First takes the user's erasure key exclusively: every run of the user holds it shared
    for as long as it runs (db/locks.py), so this waits for the user's runs in flight on any
    thread, and refuses (409) runs the user starts until the erasure is done; the threads
    listed afterwards are all there will be. Then holds the user's lock (memory writes take
    it too, so none lands half-way) and the lock of every thread found. A memory job queued
    before the erasure finds its thread gone afterwards and drops itself.
    """
    erasure = await locks.wait_erasure(tenant_id, user_id, wait)
    if erasure is None:
        raise ErasureBusy("a run of this user stayed in flight")
    try:
        user_lease = await locks.wait_user(tenant_id, user_id, wait)
        if user_lease is None:
            raise ErasureBusy("memory work for this user did not finish in time")
        try:
            return await _erase_locked(pool, locks, tenant_id, user_id, wait)
        finally:
            await user_lease.release()
    finally:
        await erasure.release()


async def _erase_locked(pool: Pool, locks: Locks, tenant_id: str, user_id: str, wait: float) -> ErasureReport:
    leases: list[Lease] = []
    try:
        async with pool.connection() as conn:
            rows = await (await conn.execute(_USER_THREADS, (tenant_id, user_id))).fetchall()
        thread_ids = [r["thread_id"] for r in rows]
        for thread_id in thread_ids:
            lease = await locks.wait_thread(thread_id, wait)
            if lease is None:
                raise ErasureBusy("a run stayed in flight on one of the user's threads")
            leases.append(lease)
        async with pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "delete from run_feedback where (tenant_id = %s and user_id = %s) or thread_id = any(%s)",
                (tenant_id, user_id, thread_ids),
            )
            feedback = cur.rowcount
            await _delete_thread_rows(conn, thread_ids)
            await conn.execute(
                "delete from run_rate_windows where tenant_id = %s and user_id = %s", (tenant_id, user_id)
            )
            await forget_resets(conn, tenant_id, user_id)
        memory = await delete_memory(pool, tenant_id, user_id)
        await prune_superseded_chunks(pool)  # knowledge versions only the erased threads cited
        return ErasureReport(len(thread_ids), memory, feedback)
    finally:
        for lease in leases:
            await lease.release()
