"""Retention: delete threads whose newest checkpoint is older than a cut-off, in batches.

No checkpoint table has a timestamp column, but `checkpoint_id` is a time-ordered UUIDv6,
so "newest checkpoint older than X" is a group-by on it against the UUIDv6 of X (measured:
27 ms for 120k rows). Threads with a run in flight are skipped (their lock is
held), and the others are deleted while their locks are held, so a run cannot start on a
thread half-way through its deletion. A thread's feedback goes with it.

`max_locks` bounds how many thread locks one pass holds at once (a run sent meanwhile to
one of them gets 409 until its group is deleted), so a batch is deleted in groups of that
many threads, each group in one transaction.

A thread with recall rows and no checkpoint left (recall/leftovers.py) is gone already: a
pass deletes what is left of it too, whatever its age.

A thread's pending memory jobs (memory/jobs.py, which hold the user's message) go with
the thread; a pass also deletes any job row older than the cut-off, whatever its thread:
such a row is work that never landed, and no copy of a user's text outlives retention.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from chatbot.db import langgraph_threads
from chatbot.db.locks import Lease, Locks
from chatbot.db.pool import Pool
from chatbot.ids import ThreadId
from chatbot.memory.jobs import delete_jobs_older_than
from chatbot.recall.leftovers import indexed_threads_after
from chatbot.retrieval.versions import prune_superseded_chunks
from chatbot.threads.deletion import delete_threads

_UUID_EPOCH_OFFSET = 0x01B21DD213814000  # 100-ns intervals from 1582-10-15 to 1970-01-01


def uuid6_floor(moment: datetime) -> str:
    """Return the smallest UUIDv6 of `moment`: every checkpoint id written before it sorts lower."""
    timestamp = int(moment.timestamp() * 10_000_000) + _UUID_EPOCH_OFFSET
    value = ((timestamp >> 12) & 0xFFFFFFFFFFFF) << 80 | (0x6000 | (timestamp & 0x0FFF)) << 64 | 0x8000 << 48
    return str(uuid.UUID(int=value))


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What a retention pass found and did."""

    stale: int
    deleted: int
    skipped_in_flight: int


async def purge_stale_threads(
    pool: Pool,
    locks: Locks,
    cutoff: datetime,
    *,
    batch_size: int = 200,
    dry_run: bool = False,
    max_locks: int | None = None,
    before_batch: Callable[[], Awaitable[None]] | None = None,
) -> RetentionReport:
    """Delete (or, with `dry_run`, count) threads untouched since `cutoff`.

    `before_batch` is awaited before each batch is scanned (the sweep renews its lease
    there; raising stops the pass between batches).
    """
    floor = uuid6_floor(cutoff)
    group = max(1, min(max_locks or batch_size, batch_size))

    async def stale(conn: AsyncConnection[Any], after: str) -> tuple[list[ThreadId], list[ThreadId]]:
        batch = await langgraph_threads.stale_threads(conn, after, floor, batch_size)
        return batch, batch

    async def still_stale(conn: AsyncConnection[Any], thread_ids: list[ThreadId]) -> list[ThreadId]:
        return await langgraph_threads.still_stale(conn, thread_ids, floor)

    async def leftovers(conn: AsyncConnection[Any], after: str) -> tuple[list[ThreadId], list[ThreadId]]:
        # Threads with recall rows and no checkpoint are gone already (recall/leftovers.py):
        # what a run wrote of them after losing its lock goes too, whatever its age.
        batch = await indexed_threads_after(conn, after, batch_size)
        return batch, await _without_checkpoints(conn, batch) if batch else []

    passes = [(stale, still_stale), (leftovers, _without_checkpoints)]
    found = [await _pass(pool, locks, scan, still, group, dry_run, before_batch) for scan, still in passes]
    stale_count, deleted, skipped = (sum(counts) for counts in zip(*found, strict=True))
    if not dry_run:
        await delete_jobs_older_than(pool, cutoff)
        await prune_superseded_chunks(pool)  # knowledge versions only the deleted threads cited
    return RetentionReport(stale_count, deleted, skipped)


Scan = Callable[[AsyncConnection[Any], str], Awaitable[tuple[list[ThreadId], list[ThreadId]]]]
"""One batch of a pass after a thread id: (the ids scanned, in order; the threads to delete among them)."""
Still = Callable[[AsyncConnection[Any], list[ThreadId]], Awaitable[list[ThreadId]]]
"""Which of the threads are still to delete, asked again under their locks."""


async def _pass(
    pool: Pool,
    locks: Locks,
    scan: Scan,
    still: Still,
    group: int,
    dry_run: bool,
    before_batch: Callable[[], Awaitable[None]] | None,
) -> tuple[int, int, int]:
    """Scan batch by batch and delete what `scan` finds, `group` locks at a time; return (found, deleted, skipped)."""
    found = deleted = skipped = 0
    after = ""
    while True:
        if before_batch is not None:
            await before_batch()
        async with pool.connection() as conn:
            scanned, doomed = await scan(conn, after)
        if not scanned:
            return found, deleted, skipped
        after = scanned[-1]
        found += len(doomed)
        if dry_run:
            continue
        for start in range(0, len(doomed), group):
            done, busy = await _delete_unless_busy(pool, locks, doomed[start : start + group], still)
            deleted += done
            skipped += busy


async def _without_checkpoints(conn: AsyncConnection[Any], thread_ids: list[ThreadId]) -> list[ThreadId]:
    written = await langgraph_threads.threads_with_checkpoints(conn, thread_ids)
    return [t for t in thread_ids if t not in written]


async def _delete_unless_busy(
    pool: Pool,
    locks: Locks,
    thread_ids: list[ThreadId],
    still: Still,
) -> tuple[int, int]:
    """Delete the threads `still` keeps, asked under their locks; return (deleted, skipped as in flight)."""
    leases: list[Lease] = []
    locked: list[ThreadId] = []
    skipped = 0
    try:
        for thread_id in thread_ids:
            lease = await locks.try_thread(thread_id)
            if lease is None:
                skipped += 1
                continue
            leases.append(lease)
            locked.append(thread_id)
        # Re-checked under the locks: a run may have finished on a thread since the scan.
        async with pool.connection() as conn:
            kept = await still(conn, locked)
        return await delete_threads(pool, kept), skipped
    finally:
        for lease in leases:
            await lease.release()
