"""Durable memory work: one `memory_jobs` row per answered turn until its memory is written.

The graph hands a `MemoryJob` to the memory writer from its last node, before the run's
final checkpoint and so before `end` is sent; the writer inserts the row at once, claimed
by its own replica for a lease, and works it. A replica killed before the write leaves the
row behind; when the lease runs out any replica claims it (a conditional update naming the
row: only one claimer wins) and does the work. The row is deleted in the transaction that
writes the memory, so a job lands once, and a row that erasure, a memory reset, thread
deletion or retention removed first is never worked.

A row becomes work only once its run is final and answered (a run cancelled or failed
after the row was written ends with another status, and its row is dropped). A job its own
replica's run handed over learns it from that run (`MemoryJob.ended`, set once the final
checkpoint is written or refused); a row picked up elsewhere, from the run's newest
checkpoint, which must hold the run record of that run with status `answered`. Runs code
that ends a run some other way may call `discard` for its row.

It lives in memory, not in agent, so the import goes one way: the graph (agent) knows
what memory accepts, memory never needs the graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from chatbot.db import langgraph_tables
from chatbot.db.pool import Pool
from chatbot.db.run_record import RecordedRun
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.memory import queries
from chatbot.memory.extraction import MemoryCandidates

RunOutcome = Literal["answered", "other", "unfinished"]
RunEnded = asyncio.Future[RunOutcome]
"""Set by the run service with how a run ended ("answered" or "other") once its final write is done."""


@dataclass(frozen=True, slots=True)
class MemoryJob:
    """One answered turn handed to the memory writer, after the answer."""

    tenant_id: TenantId
    user_id: UserId
    thread_id: ThreadId
    run_id: RunId
    locale: str
    user_text: str
    offline_candidates: MemoryCandidates | None = None
    """What the offline rules found in `user_text`, when the graph already ran them for this
    turn (the offline responder needs them to answer "noted"); the writer then reuses them
    instead of extracting the same message a second time. Never stored: the rules are
    deterministic, so a replica picking the row up finds the same."""
    ended: RunEnded | None = field(default=None, compare=False)
    """How the job's run ended ("answered" or "other"), set by the run that handed the job
    over once its final checkpoint is written or refused (threads/runs.py): the writer waits
    on it instead of reading the run's record. None for a row picked up from the table."""


MemorySink = Callable[[MemoryJob], Awaitable[None] | None]
"""Takes a turn's memory job; the graph awaits what it returns before the run ends."""


def drop_memory_job(_: MemoryJob) -> None:
    """Forget a memory job (a graph built without a memory writer)."""


async def free_rows(pool: Pool, now: datetime, limit: int) -> list[tuple[ThreadId, RunId]]:
    """Return up to `limit` (thread_id, run_id) of rows whose claim ran out, oldest first."""
    async with pool.connection() as conn:
        rows = await queries.free_jobs(conn, now, limit)
    return [(ThreadId(thread_id), RunId(run_id)) for thread_id, run_id in rows]


async def claim(
    pool: Pool, thread_id: ThreadId, run_id: RunId, *, now: datetime, lease: timedelta, holder: str
) -> tuple[MemoryJob, int] | None:
    """Claim a free row for `lease`; return its job and how many claims it has had, None when another won."""
    async with pool.connection() as conn:
        row = await queries.claim_job(conn, thread_id, run_id, now=now, lease=lease, holder=holder)
    if row is None:
        return None
    job = MemoryJob(
        tenant_id=TenantId(row["tenant_id"]),
        user_id=UserId(row["user_id"]),
        thread_id=thread_id,
        run_id=run_id,
        locale=row["locale"],
        user_text=row["user_text"],
    )
    return job, int(row["attempts"])


async def defer(pool: Pool, thread_id: ThreadId, run_id: RunId, until: datetime) -> None:
    """Leave a run's job pending until `until` (over budget: when the budget's period resets)."""
    async with pool.connection() as conn:
        await queries.defer_job(conn, thread_id, run_id, until)


async def delete_jobs_older_than(pool: Pool, cutoff: datetime) -> int:
    """Delete the jobs written before `cutoff` (retention: no row outlives the retention period)."""
    async with pool.connection() as conn:
        return await queries.delete_jobs_older_than(conn, cutoff)


async def discard(pool: Pool, thread_id: ThreadId, run_id: RunId) -> None:
    """Drop a run's job, if it has one (its run was not answered after all, or nothing is worth writing)."""
    async with pool.connection() as conn:
        await queries.take_job(conn, thread_id, run_id)


async def run_outcome(pool: Pool, job: MemoryJob) -> RunOutcome:
    """Tell whether the job's run ended answered, ended otherwise, or has not ended yet.

    The run's newest checkpoint holds its record (db/run_record.py: the run's id and, once
    the run is final, its terminal status).
    """
    async with pool.connection() as conn:
        rows = await langgraph_tables.run_record_checkpoints(conn, job.thread_id, job.run_id, job.tenant_id)
    record = RecordedRun.parse(rows[0]["record"]) if rows else None
    if record is None or record.run_id != job.run_id or record.status is None:
        return "unfinished"
    return "answered" if record.status == "answered" else "other"
