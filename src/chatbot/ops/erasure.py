"""Erasing a user: each feature deletes its own data, under the locks that keep runs and memory out.

threads/ deletes the user's threads (found by their checkpoints and by recall rows indexed
for the user, then every table keyed by `thread_id`, found in the catalogue), their feedback
and rate counters; memory/ deletes everything stored under the
user's namespace (every table keyed by store prefix) and the reset row; retrieval/ prunes the
knowledge versions only the erased threads cited. This module only orders them.
"""

from __future__ import annotations

from collections.abc import Callable

from chatbot.budgets.admin import forget_user as forget_user_budgets
from chatbot.db.locks import Lease, Locks
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, UserId
from chatbot.memory.resets import erase_memory
from chatbot.responses import ErasureReport
from chatbot.retrieval.versions import prune_superseded_chunks
from chatbot.threads.deletion import delete_user_threads, user_threads

ERASURE_WAIT_SECONDS = 10.0
"""How long an erasure waits for the user's runs and memory writes in flight (then 409)."""


class ErasureBusy(Exception):
    """A run stayed in flight on one of the user's threads past the bounded wait."""


async def erase_user(
    pool: Pool,
    locks: Locks,
    tenant_id: TenantId,
    user_id: UserId,
    *,
    drop_queued: Callable[[TenantId, UserId], None] | None = None,
) -> ErasureReport:
    """Remove the user's threads, memory, feedback and counters in one tenant.

    `drop_queued` (the replica's `MemoryWriter.forget`) drops this replica's queued memory jobs
    of the user first, at once; other replicas' jobs find their rows gone.

    First takes the user's erasure key exclusively: every run of the user holds it shared
    for as long as it runs (db/locks.py), so this waits for the user's runs in flight on any
    thread, and refuses (409) runs the user starts until the erasure is done; the threads
    listed afterwards are all there will be. Then holds the user's lock (memory writes take
    it too, so none lands half-way) and the lock of every thread found. The user's pending
    memory jobs (rows holding their messages) are deleted with their memory: a job claimed
    before the erasure finds its row gone afterwards and drops itself, on any replica.
    """
    if drop_queued is not None:
        drop_queued(tenant_id, user_id)
    erasure = await locks.wait_erasure(tenant_id, user_id, ERASURE_WAIT_SECONDS)
    if erasure is None:
        raise ErasureBusy("a run of this user stayed in flight")
    try:
        user_lease = await locks.wait_user(tenant_id, user_id, ERASURE_WAIT_SECONDS)
        if user_lease is None:
            raise ErasureBusy("memory work for this user did not finish in time")
        try:
            return await _erase_locked(pool, locks, tenant_id, user_id, ERASURE_WAIT_SECONDS)
        finally:
            await user_lease.release()
    finally:
        await erasure.release()


async def _erase_locked(pool: Pool, locks: Locks, tenant_id: TenantId, user_id: UserId, wait: float) -> ErasureReport:
    leases: list[Lease] = []
    try:
        thread_ids = await user_threads(pool, tenant_id, user_id)
        for thread_id in thread_ids:
            lease = await locks.wait_thread(thread_id, wait)
            if lease is None:
                raise ErasureBusy("a run stayed in flight on one of the user's threads")
            leases.append(lease)
        async with pool.connection() as conn, conn.transaction():
            deleted = await delete_user_threads(conn, tenant_id, user_id, thread_ids)
            memory = await erase_memory(conn, tenant_id, user_id)
            await forget_user_budgets(conn, tenant_id, user_id)
        await prune_superseded_chunks(pool)  # knowledge versions only the erased threads cited
        return ErasureReport(
            threads_deleted=deleted.threads, memory_items_deleted=memory, feedback_deleted=deleted.feedback
        )
    finally:
        for lease in leases:
            await lease.release()
