"""The memory feature's own SQL: `memory_jobs` (memory/jobs.py) and `memory_resets` (memory/resets.py).

Statements as module constants beside the small functions that run them on a connection
the caller passes in. The store's tables are db/langgraph_store.py's (AGENTS.md, "Where
SQL lives").
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from chatbot.db.connection_options import Conn, Cursor
from chatbot.ids import RunId, TenantId, ThreadId, UserId

if TYPE_CHECKING:
    from chatbot.memory.jobs import MemoryJob


INSERT_JOB = """
insert into memory_jobs
    (thread_id, run_id, tenant_id, user_id, locale, user_text, created_at, claimed_until, claimed_by)
values (%(thread)s, %(run)s, %(tenant)s, %(user)s, %(locale)s, %(text)s, %(now)s, %(until)s, %(holder)s)
on conflict (thread_id, run_id) do nothing
"""
# Multi-shard by nature (any thread's row may be free): a background read, never a run's.
FREE_JOBS = "select thread_id, run_id from memory_jobs where claimed_until < %s order by claimed_until limit %s"


class ClaimedJob(TypedDict):
    """A claimed memory job's row (CLAIM_JOB's columns): the claims it has had count this one."""

    tenant_id: TenantId
    user_id: UserId
    locale: str
    user_text: str
    attempts: int


# Validated where it is read (a column of another shape raises), built once.
_CLAIMED_JOB: TypeAdapter[ClaimedJob] = TypeAdapter(ClaimedJob)

CLAIM_JOB = """
update memory_jobs set claimed_until = %(until)s, claimed_by = %(holder)s, attempts = attempts + 1
where thread_id = %(thread)s and run_id = %(run)s and claimed_until < %(now)s
returning tenant_id, user_id, locale, user_text, attempts
"""
TAKE_JOB = "delete from memory_jobs where thread_id = %s and run_id = %s"
# Over budget: the job waits, unclaimed, until the budget's period resets; that claim is not
# counted against it (a job that waits a night must not be abandoned for its claims).
DEFER_JOB = """
update memory_jobs set claimed_until = %(until)s, attempts = greatest(attempts - 1, 0)
where thread_id = %(thread)s and run_id = %(run)s
"""
JOBS_OF_USER = "delete from memory_jobs where tenant_id = %s and user_id = %s"
JOBS_OLDER_THAN = "delete from memory_jobs where created_at < %s"
FORGET_RESETS = "delete from memory_resets where tenant_id = %s and user_id = %s"


async def insert_job(conn: Conn, job: MemoryJob, *, now: datetime, lease: timedelta, holder: str) -> None:
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
    await conn.execute(INSERT_JOB, params)


async def free_jobs(conn: Conn, now: datetime, limit: int) -> list[tuple[str, str]]:
    """Return up to `limit` (thread_id, run_id) of rows whose claim ran out, oldest first."""
    rows = await (await conn.execute(FREE_JOBS, (now, limit))).fetchall()
    return [(r["thread_id"], r["run_id"]) for r in rows]


async def claim_job(
    conn: Conn, thread_id: ThreadId, run_id: RunId, *, now: datetime, lease: timedelta, holder: str
) -> ClaimedJob | None:
    """Claim a free row for `lease`; return its columns and claim count, None when another won."""
    params = {"thread": thread_id, "run": run_id, "now": now, "until": now + lease, "holder": holder}
    row = await (await conn.execute(CLAIM_JOB, params)).fetchone()
    return None if row is None else _CLAIMED_JOB.validate_python(row)


async def send_take_job(conn: Conn, thread_id: ThreadId, run_id: RunId) -> Cursor:
    """Send `take_job`'s delete without waiting (in a pipeline); its cursor's rowcount says, once read."""
    return await conn.execute(TAKE_JOB, (thread_id, run_id))


async def take_job(conn: Conn, thread_id: ThreadId, run_id: RunId) -> bool:
    """Delete the job's row in the caller's transaction; False when it is gone (done, erased, reset).

    The delete also locks the row until the transaction ends: a second worker's `take_job`
    waits, then finds nothing.
    """
    cur = await conn.execute(TAKE_JOB, (thread_id, run_id))
    return cur.rowcount > 0


async def delete_jobs_of_user(conn: Conn, tenant_id: TenantId, user_id: UserId) -> int:
    """Delete every pending job of the user (erasure, memory reset), in the caller's transaction."""
    cur = await conn.execute(JOBS_OF_USER, (tenant_id, user_id))
    return max(cur.rowcount, 0)


async def defer_job(conn: Conn, thread_id: ThreadId, run_id: RunId, until: datetime) -> None:
    """Leave a job pending until `until` (its budget's reset), its claim uncounted."""
    await conn.execute(DEFER_JOB, {"thread": thread_id, "run": run_id, "until": until})


async def delete_jobs_older_than(conn: Conn, cutoff: datetime) -> int:
    """Delete jobs written before `cutoff` (retention: no row outlives the retention period)."""
    cur = await conn.execute(JOBS_OLDER_THAN, (cutoff,))
    return max(cur.rowcount, 0)


async def forget_resets(conn: Conn, tenant_id: TenantId, user_id: UserId) -> None:
    """Delete the user's reset row (erasure: no row may keep the user's id)."""
    await conn.execute(FORGET_RESETS, (tenant_id, user_id))
