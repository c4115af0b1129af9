"""Storage and latency per turn on one long thread: is a turn at 500 as cheap as at 50?

Runs one thread to 500 turns in-process (the service's graph, offline model, Postgres
checkpointer and store, the same two checkpoint writes per run as the runs endpoint) with
5 retrieved chunks of ~2 KB each turn, and prints the bytes each turn adds to the
checkpoint tables and the turn latency over turns 11-60 and 451-500, with their ratios.

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
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.constants import START
from langgraph.store.postgres.aio import AsyncPostgresStore

from bench._pg import bench_database
from chatbot.agent.context import Context
from chatbot.agent.deps import AgentDeps
from chatbot.agent.graph import build_graph
from chatbot.agent.state import META_KEY, now_rfc3339, user_turn
from chatbot.caller import CallerContext
from chatbot.config import Settings
from chatbot.db.pool import make_pool

CHUNKS = [
    {
        "chunk_id": f"doc-{i}#c{i}",
        "document_id": f"doc-{i}",
        "title": f"Document {i}",
        "language": "en",
        "score": 1.0 - i / 10,
        "text": (f"Chunk {i}. " + "Coverage, deductibles and claim documents. " * 60)[:2000],
    }
    for i in range(5)
]
_SIZE = """
select coalesce((select sum(pg_column_size(c.*)) from checkpoints c where thread_id = %(t)s), 0)
     + coalesce((select sum(pg_column_size(b.*)) from checkpoint_blobs b where thread_id = %(t)s), 0)
     + coalesce((select sum(pg_column_size(w.*)) from checkpoint_writes w where thread_id = %(t)s), 0) as bytes
"""


async def _chunks(_: CallerContext, __: str) -> list[dict[str, Any]]:
    return CHUNKS


async def main(turns: int) -> None:
    async with bench_database("growth") as url:
        settings = Settings(environment="dev", database_url=url)
        pool = make_pool(url, settings, name="bench", min_size=1, max_size=4)
        await pool.open(wait=True)
        try:
            graph = build_graph(AgentDeps(retriever=_chunks)).compile(
                checkpointer=AsyncPostgresSaver(pool),
                store=AsyncPostgresStore(pool),  # type: ignore[arg-type]
            )
            thread = f"growth-{uuid.uuid4().hex[:8]}"
            sizes, latencies = [0], []
            async with pool.connection() as conn:
                for turn in range(1, turns + 1):
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
                    context = Context(tenant_id="bench", user_id="u", locale="en-US", run_id=run_id, thread_id=thread)
                    async for _ in graph.astream(
                        None, config, context=context, stream_mode="custom", durability="exit"
                    ):
                        pass
                    latencies.append(time.perf_counter() - started)
                    row = await (await conn.execute(_SIZE, {"t": thread})).fetchone()
                    sizes.append(int(row["bytes"]))
        finally:
            await pool.close()
    added = [b - a for a, b in itertools.pairwise(sizes)]

    def window(values: list[float], lo: int, hi: int) -> list[float]:
        return values[lo - 1 : hi]

    early_lo, early_hi, late_lo, late_hi = 11, 60, turns - 49, turns
    early_bytes = statistics.mean(window([float(a) for a in added], early_lo, early_hi))
    late_bytes = statistics.mean(window([float(a) for a in added], late_lo, late_hi))
    early_ms = statistics.median(window(latencies, early_lo, early_hi)) * 1000
    late_ms = statistics.median(window(latencies, late_lo, late_hi)) * 1000
    print(f"one thread, {turns} turns, 5 chunks x ~2 KB per turn, offline model, durability=exit")
    print(
        f"{'':28}{'turns ' + str(early_lo) + '-' + str(early_hi):>16}{'turns ' + str(late_lo) + '-' + str(late_hi):>18}"
        f"{'ratio':>9}"
    )
    print(
        f"{'bytes added per turn (mean)':28}{early_bytes:>16,.0f}{late_bytes:>18,.0f}{late_bytes / early_bytes:>9.2f}"
    )
    print(f"{'turn latency p50 (ms)':28}{early_ms:>16.1f}{late_ms:>18.1f}{late_ms / early_ms:>9.2f}")
    print(f"total checkpoint bytes after {turns} turns: {sizes[-1]:,}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=500)
    asyncio.run(main(parser.parse_args().turns))
