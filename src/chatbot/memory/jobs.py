"""Durable memory work: one `memory_jobs` row per answered turn until its memory is written.

The graph hands a `MemoryJob` to the memory writer from its last node, before the run's
final checkpoint and so before `end` is sent; the writer inserts the row at once, claimed
by its own replica for a lease, and works it. A replica killed before the write leaves the
row behind; when the lease runs out any replica claims it (a conditional update naming the
row: only one claimer wins) and does the work. The row is deleted in the transaction that
writes the memory, so a job lands once, and a row that erasure, a memory reset, thread
deletion or retention removed first is never worked.

A row becomes work only once its run is final and answered: the worker reads the run's
newest checkpoint and needs the run record of that run with status `answered` (a run
cancelled or failed after the row was written ends with another status, and its row is
dropped). Runs code that ends a run some other way may call `discard` for its row.

It lives in memory, not in agent, so the import goes one way: the graph (agent) knows
what memory accepts, memory never needs the graph.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg import AsyncConnection

from chatbot.db import langgraph_tables
from chatbot.db.pool import Pool
from chatbot.db.run_record import RecordedRun
from chatbot.memory.extraction import MemoryCandidates

Conn = AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class MemoryJob:
    """One answered turn handed to the memory writer, after the answer."""

    tenant_id: str
    user_id: str
    thread_id: str
    run_id: str
    locale: str
    user_text: str
    offline_candidates: MemoryCandidates | None = None
    """What the offline rules found in `user_text`, when the graph already ran them for this
    turn (the offline responder needs them to answer "noted"); the writer then reuses them
    instead of extracting the same message a second time. Never stored: the rules are
    deterministic, so a replica picking the row up finds the same."""


MemorySink = Callable[[MemoryJob], Awaitable[None] | None]
"""Takes a turn's memory job; the graph awaits what it returns before the run ends."""


def drop_memory_job(_: MemoryJob) -> None:
    """Forget a memory job (a graph built without a memory writer)."""


RunOutcome = Literal["answered", "other", "unfinished"]

_INSERT = """
insert into memory_jobs
    (thread_id, run_id, tenant_id, user_id, locale, user_text, created_at, claimed_until, claimed_by)
values (%(thread)s, %(run)s, %(tenant)s, %(user)s, %(locale)s, %(text)s, %(now)s, %(until)s, %(holder)s)
on conflict (thread_id, run_id) do nothing
"""
# Multi-shard by nature (any thread's row may be free): a background read, never a run's.
_FREE = "select thread_id, run_id from memory_jobs where claimed_until < %s order by claimed_until limit %s"
_CLAIM = """
update memory_jobs set claimed_until = %(until)s, claimed_by = %(holder)s, attempts = attempts + 1
where thread_id = %(thread)s and run_id = %(run)s and claimed_until < %(now)s
returning tenant_id, user_id, locale, user_text, attempts
"""
_TAKE = "delete from memory_jobs where thread_id = %s and run_id = %s"
_OF_USER = "delete from memory_jobs where tenant_id = %s and user_id = %s"
_OLDER_THAN = "delete from memory_jobs where created_at < %s"


async def insert(conn: Conn, job: MemoryJob, *, now: datetime, lease: timedelta, holder: str) -> None:
    """Write the job's row, claimed by `holder` for `lease` (the replica that works it at once)."""
    params = {
        "thread": job.thread_id,
        "run": job.run_id,
        "tenant": job.tenant_id,
        "user": job.user_id,
        "locale": job.locale,
        "text": job.user_text,
        "now": now,
        "until": now + lease,
        "holder": holder,
    }
    await conn.execute(_INSERT, params)


async def free_rows(pool: Pool, now: datetime, limit: int) -> list[tuple[str, str]]:
    """Return up to `limit` (thread_id, run_id) of rows whose claim ran out, oldest first."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(_FREE, (now, limit))).fetchall()
    return [(r["thread_id"], r["run_id"]) for r in rows]


async def claim(
    pool: Pool, thread_id: str, run_id: str, *, now: datetime, lease: timedelta, holder: str
) -> tuple[MemoryJob, int] | None:
    """Claim a free row for `lease`; return its job and how many claims it has had, None when another won."""
    params = {"thread": thread_id, "run": run_id, "now": now, "until": now + lease, "holder": holder}
    async with pool.connection() as conn:
        row = await (await conn.execute(_CLAIM, params)).fetchone()
    if row is None:
        return None
    job = MemoryJob(
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        thread_id=thread_id,
        run_id=run_id,
        locale=row["locale"],
        user_text=row["user_text"],
    )
    return job, int(row["attempts"])


async def take(conn: Conn, thread_id: str, run_id: str) -> bool:
    """Delete the job's row in the caller's transaction; False when it is gone (done, erased, reset).

    The delete also locks the row until the transaction ends: a second worker's `take`
    waits, then finds nothing.
    """
    cur = await conn.execute(_TAKE, (thread_id, run_id))
    return cur.rowcount > 0


async def discard(pool: Pool, thread_id: str, run_id: str) -> None:
    """Drop a run's job, if it has one (its run was not answered after all, or nothing is worth writing)."""
    async with pool.connection() as conn:
        await conn.execute(_TAKE, (thread_id, run_id))


async def delete_of_user(conn: Conn, tenant_id: str, user_id: str) -> int:
    """Delete every pending job of the user (erasure, memory reset), in the caller's transaction."""
    cur = await conn.execute(_OF_USER, (tenant_id, user_id))
    return max(cur.rowcount, 0)


async def delete_older_than(conn: Conn, cutoff: datetime) -> int:
    """Delete jobs written before `cutoff` (retention: no row outlives the retention period)."""
    cur = await conn.execute(_OLDER_THAN, (cutoff,))
    return max(cur.rowcount, 0)


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
