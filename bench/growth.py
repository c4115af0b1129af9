"""Storage and latency per turn on one long thread: is a turn at 500 as cheap as at 50?

Runs one thread to 500 turns in-process (the service's graph, offline model, Postgres
checkpointer and store, the same two checkpoint writes per run as the runs endpoint) with
5 retrieved chunks of ~2 KB each turn, and prints the bytes each turn adds to the
checkpoint tables over turns 11-60 and 451-500, and the p50 turn latency of turns 11-60
(of a fresh thread) and 451-500 (of the long one), timed alternately, with the ratios.

    .venv/bin/python -m bench.growth [--turns 500]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
import uuid
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.constants import START
from langgraph.store.postgres.aio import AsyncPostgresStore

from bench._pg import bench_database
from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.agent.state import user_turn
from chatbot.caller import CallerContext
from chatbot.config import Settings
from chatbot.db.pool import make_pool
from chatbot.db.saver import PooledPostgresSaver
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.responses import QuotedChunk
from chatbot.timestamps import now_rfc3339
from chatbot.turns import META_KEY

CHUNKS = [
    QuotedChunk(
        chunk_id=f"doc-{i}#c{i}",
        document_id=f"doc-{i}",
        title=f"Document {i}",
        language="en",
        score=1.0 - i / 10,
        text=(f"Chunk {i}. " + "Coverage, deductibles and claim documents. " * 60)[:2000],
    )
    for i in range(5)
]
_SIZE = """
select coalesce((select sum(pg_column_size(c.*)) from checkpoints c where thread_id = %(t)s), 0)
     + coalesce((select sum(pg_column_size(b.*)) from checkpoint_blobs b where thread_id = %(t)s), 0)
     + coalesce((select sum(pg_column_size(w.*)) from checkpoint_writes w where thread_id = %(t)s), 0) as bytes
"""


async def _chunks(_: CallerContext, __: str) -> list[QuotedChunk]:
    return list(CHUNKS)


async def run_turn(graph: Any, thread: str, turn: int) -> float:
    """Run one turn the way the runs endpoint does; return its wall time in seconds."""
    run_id = str(uuid.uuid4())
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread},
        "metadata": {"tenant_id": "bench", "user_id": "u", "run_id": run_id},
    }
    question = HumanMessage(
        f"Question {turn}: what does car body insurance cover after a collision?",
        id=str(uuid.uuid4()),
        additional_kwargs={META_KEY: {"created_at": now_rfc3339(), "run_id": run_id}},
    )
    started = time.perf_counter()
    await graph.aupdate_state(config, user_turn(question), as_node=START)
    context = Context(
        tenant_id=TenantId("bench"),
        user_id=UserId("u"),
        locale="en-US",
        run_id=RunId(run_id),
        thread_id=ThreadId(thread),
    )
    async for _ in graph.astream(None, config, context=context, stream_mode="custom", durability="exit"):
        pass
    return time.perf_counter() - started


async def main(turns: int, other_threads: int) -> None:
    async with bench_database("growth") as url:
        settings = Settings(environment="dev", database_url=url)
        pool = make_pool(url, settings, name="bench", min_size=1, max_size=4)
        await pool.open(wait=True)
        try:
            graph = build_graph(AgentDeps(retriever=_chunks)).compile(
                checkpointer=PooledPostgresSaver(pool),  # the service's saver
                store=AsyncPostgresStore(pool),
            )
            # A database holds many threads. With only one, the planner's statistics say
            # every checkpoint row belongs to it and it scans the thread's blobs instead of
            # probing their primary key, which is a cost of the bench, not of the service.
            for other in range(other_threads):
                for turn in range(1, 6):
                    await run_turn(graph, f"other-{other}", turn)
            async with pool.connection() as conn:
                await conn.execute("analyze")
            long_thread, fresh_thread = f"long-{uuid.uuid4().hex[:8]}", f"fresh-{uuid.uuid4().hex[:8]}"
            sizes = [0]
            async with pool.connection() as conn:
                for turn in range(1, turns - 49):  # the long thread, up to its last 50 turns
                    await run_turn(graph, long_thread, turn)
                    row = await (await conn.execute(_SIZE, {"t": long_thread})).fetchone()
                    assert row is not None  # a select with no from returns its one row
                    sizes.append(int(row["bytes"]))
                for turn in range(1, 11):  # a fresh thread's first turns, not measured
                    await run_turn(graph, fresh_thread, turn)
                # Side by side: the machine is shared and noisy, so early and late turns are
                # timed in alternation rather than minutes apart.
                early, late = [], []
                for step in range(50):
                    early.append(await run_turn(graph, fresh_thread, 11 + step))
                    late.append(await run_turn(graph, long_thread, turns - 49 + step))
                    row = await (await conn.execute(_SIZE, {"t": long_thread})).fetchone()
                    assert row is not None  # a select with no from returns its one row
                    sizes.append(int(row["bytes"]))
        finally:
            await pool.close()
    added = [float(b - a) for a, b in itertools.pairwise(sizes)]
    early_bytes, late_bytes = statistics.mean(added[10:60]), statistics.mean(added[turns - 50 : turns])
    early_ms, late_ms = statistics.median(early) * 1000, statistics.median(late) * 1000
    print(
        f"one thread to {turns} turns (beside {other_threads} threads of 5 turns); 5 chunks x ~2 KB per turn; "
        "offline model; durability=exit"
    )
    print(f"{'':30}{'turns 11-60':>14}{f'turns {turns - 49}-{turns}':>16}{'ratio':>8}")
    print(
        f"{'bytes added per turn (mean)':30}{early_bytes:>14,.0f}{late_bytes:>16,.0f}{late_bytes / early_bytes:>8.2f}"
    )
    print(f"{'turn latency p50 (ms)':30}{early_ms:>14.1f}{late_ms:>16.1f}{late_ms / early_ms:>8.2f}")
    print("(latencies: turns 11-60 of a fresh thread and the long thread's last 50, timed alternately)")
    print(f"checkpoint bytes of the long thread after {turns} turns: {sizes[-1]:,}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--other-threads", type=int, default=100, help="threads of 5 turns created first")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.other_threads))
