"""Lifecycle costs: a retention sweep over many stale threads, and a memory write with its reset check.

  sweep    N stale threads (copies, by SQL, of a real 3-turn thread's checkpoint rows) deleted
           by a replica's sweep (batches of 200, 8 thread locks held at once) and, on a second
           set, by `chatbot retention`'s pass (up to --max-locks thread locks at once, its own lock session)
  memory   M memory jobs, one per user, each as a replica works its own fresh job: the job's
           row written (with the reset lock held shared, pipelined), then, told by its run
           that it ended answered (`MemoryJob.ended`), the offline extraction, the user's
           lock, and one transaction with the reset lock, the row's delete, the store reads
           and the puts; p50/p95 per job. A row picked up elsewhere reads its run's final
           record first (a real answered run of the service, made once): timed too

    .venv/bin/python -m bench.lifecycle [--threads 2000] [--jobs 200]

Uses CHATBOT_DATABASE_URL (migrated here; the bench's rows are deleted afterwards) or starts
an embedded Postgres in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
from langchain_core.messages import HumanMessage
from langgraph.constants import START

from bench._pg import bench_app
from chatbot import metrics
from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.agent.state import user_turn
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool, connection_kwargs
from chatbot.db.saver import PooledPostgresSaver
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.memory.items import utcnow
from chatbot.memory.jobs import MemoryJob, RunEnded
from chatbot.memory.queries import insert_job
from chatbot.memory.resets import hold_for_write
from chatbot.memory.writer import MemoryWriter
from chatbot.ops.retention import purge_stale_threads
from chatbot.ops.sweeper import MAX_LOCKS, RetentionSweeper
from chatbot.threads.deletion import delete_threads
from chatbot.timestamps import now_rfc3339
from chatbot.turns import META_KEY

TEMPLATE = ThreadId("bench-lifecycle-template")
MEMORY_THREAD = ThreadId("bench-lifecycle-memory")
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


async def build_template(pool: Pool) -> None:
    """Run three real turns on the template thread."""
    graph = build_graph(AgentDeps()).compile(checkpointer=PooledPostgresSaver(pool))
    for k in range(3):
        message = HumanMessage(f"question {k}", id=f"m{k}", additional_kwargs={META_KEY: {"created_at": now_rfc3339()}})
        config: Any = {"configurable": {"thread_id": TEMPLATE}, "metadata": {"tenant_id": "bench", "user_id": "u1"}}
        await graph.aupdate_state(config, user_turn(message), as_node=START)
        async for _ in graph.astream(
            None,
            config,
            context=Context(
                tenant_id=TenantId("bench"),
                user_id=UserId("u1"),
                locale="en",
                run_id=RunId(f"run-{k}"),
                thread_id=ThreadId(TEMPLATE),
            ),
        ):
            pass


async def clone(pool: Pool, prefix: str, count: int) -> None:
    """Copy the template's rows to `count` threads named prefix-0..count-1."""
    async with pool.connection() as conn:
        for table in TABLES:
            rows = await (
                await conn.execute(
                    "select column_name from information_schema.columns where table_name = %s "
                    "order by ordinal_position",
                    (table,),
                )
            ).fetchall()
            columns = [r["column_name"] for r in rows]
            chosen = ", ".join("%(prefix)s || g" if c == "thread_id" else c for c in columns)
            await conn.execute(
                f"insert into {table} ({', '.join(columns)}) "  # table and column names from the catalogue
                f"select {chosen} from {table}, generate_series(0, %(n)s - 1) g where thread_id = %(template)s",
                {"prefix": f"{prefix}-", "n": count, "template": TEMPLATE},
            )


async def answered_run(app: Any, settings: Settings) -> str:
    """Run one real answered turn of the service (the offline model notes a fact) and return its run id."""
    token = mint_token(settings, tenant=TenantId("bench"), user=UserId("bench-writer"), locale="en-US", ttl=600)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.post(
            f"/v1/threads/{MEMORY_THREAD}/runs",
            json={"message": {"content": "Remember that I live in Yazd."}},
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
    body = response.json()
    assert response.status_code == 200 and body["status"] == "answered", body
    return str(body["run_id"])


async def count_threads(pool: Pool, prefix: str) -> int:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "select count(distinct thread_id) as n from checkpoints where thread_id like %s", (prefix + "-%",)
            )
        ).fetchone()
    return int(row["n"]) if row else 0


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(threads: int, jobs: int) -> None:
    """Measure and print."""
    async with bench_app("bench_lifecycle") as (app, settings):
        pool: Pool = app.state.services.pool
        locks: Locks = app.state.services.locks
        await build_template(pool)
        await asyncio.sleep(1.0)  # everything so far is older than the cut-off below
        cutoff_days = 0.5 / 86400
        # The replicas' sweep.
        await clone(pool, "sweep", threads)
        sweeper = RetentionSweeper(pool=pool, locks=locks, days=cutoff_days, interval_minutes=60)
        await asyncio.sleep(0.6)
        started = time.perf_counter()
        report = await sweeper.sweep_once()
        sweep_seconds = time.perf_counter() - started
        assert report is not None and await count_threads(pool, "sweep") == 0
        # The pass by itself, holding 8 to 64 thread locks at once on a lock session of its own.
        passes = {}
        for max_locks in (8, 32, 64):
            await build_template(pool)  # each pass takes the template too
            await clone(pool, "pass", threads)
            await asyncio.sleep(0.6)
            pass_locks = Locks(settings.database_url or "", connection_kwargs(settings), sessions=1)
            try:
                started = time.perf_counter()
                cutoff = datetime.fromtimestamp(time.time() - 0.5, UTC)
                done = await purge_stale_threads(pool, pass_locks, cutoff, max_locks=max_locks)
                passes[max_locks] = (done.deleted, time.perf_counter() - started)
            finally:
                await pass_locks.close()
        await build_template(pool)
        # Memory jobs, one user each, all naming one real answered run: a job becomes work
        # only once its run's final record says answered (memory/jobs.py).
        run_id = await answered_run(app, settings)
        writer = MemoryWriter(pool=pool, locks=locks, max_facts=50)
        latencies: dict[bool, list[float]] = {True: [], False: []}
        written = metrics.MEMORY_WRITES.labels("written")._value.get()
        for k in range(jobs):
            fresh = k % 2 == 0
            ended: RunEnded = asyncio.get_running_loop().create_future()
            ended.set_result("answered")  # what the run service tells its own jobs
            job = MemoryJob(
                tenant_id=TenantId("bench"),
                user_id=UserId(f"user-{k}"),
                thread_id=ThreadId(MEMORY_THREAD),
                run_id=RunId(run_id),
                locale="en-US",
                user_text="remember that I live in Yazd and prefer email",
                ended=ended if fresh else None,
            )
            started = time.perf_counter()
            async with pool.connection() as conn, conn.pipeline(), conn.transaction():  # what `submit` writes
                await hold_for_write(conn, job.tenant_id, job.user_id)
                await insert_job(conn, job, now=utcnow(), lease=writer.lease, holder=writer.holder)
            await writer._process(job, fresh)  # the job's whole path, timed
            latencies[fresh].append((time.perf_counter() - started) * 1000)
        written = metrics.MEMORY_WRITES.labels("written")._value.get() - written
        assert written == jobs, f"{written} of {jobs} jobs wrote memory"  # none skipped as unfinished
        async with pool.connection() as conn:
            await conn.execute("delete from store where prefix like 'bench.%'")
        await delete_threads(pool, [TEMPLATE, MEMORY_THREAD])
    print(f"retention, {threads} stale threads of 3 turns, batches of 200")
    print(
        f"  replica sweep, {MAX_LOCKS} locks at once: {sweep_seconds:6.2f} s "
        f"{report.deleted / sweep_seconds:6.0f} threads/s"
    )
    for max_locks, (deleted, seconds) in passes.items():
        print(f"  pass, {max_locks:>2} locks at once:          {seconds:6.2f} s {deleted / seconds:6.0f} threads/s")
    print(f"memory writes, {jobs} jobs (row written, lock, row deleted + store writes), ms")
    for fresh, label in ((True, "fresh, told by its run"), (False, "picked up, run's record read")):
        times = latencies[fresh]
        print(f"  {label:<30} p50 {statistics.median(times):6.2f}  p95 {percentile(times, 0.95):6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.threads, args.jobs))
