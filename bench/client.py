"""What the typed client costs over raw httpx, per run, against a real `chatbot serve`.

    .venv/bin/python -m bench.client [--runs 200] [--concurrency 16]

Three ways to send the same runs (offline model, demo knowledge base, a fresh thread per
run): raw httpx reading the SSE body to `end`; `AsyncChatbotClient.run` (SSE decoded line
by line, `end` parsed into `RunEnd`); and the sync `ChatbotClient.run`, one at a time.
The difference is the client's own overhead. 2 shared cores: compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from bench._pg import bench_database
from bench.runs import load_questions, server
from chatbot.client import AsyncChatbotClient, ChatbotClient, MintedTokens
from chatbot.config import Settings
from chatbot.db.pool import make_pool
from chatbot.ids import TenantId
from chatbot.retrieval.ingest import ingest_paths

TENANT = TenantId("acme")


async def timed(label: str, runs: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> None:
    """Run `one` `runs` times, `concurrency` at a time; print p50, p95 and runs per second."""
    latencies: list[float] = []
    queue = iter(range(runs))

    async def worker() -> None:
        for i in queue:
            started = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    q = statistics.quantiles(latencies, n=20)
    print(
        f"{label:<30} c={concurrency:<3} p50 {q[9] * 1000:6.1f} ms  p95 {q[18] * 1000:6.1f} ms  "
        f"{runs / wall:6.1f} runs/s"
    )


async def main(args: argparse.Namespace) -> None:
    """Set up the database and a replica; measure the three clients."""
    secret = secrets.token_urlsafe(48)
    questions = load_questions()
    async with bench_database("client") as url:
        pool = make_pool(url, Settings(environment="dev", database_url=url), name="kb", min_size=1, max_size=2)
        await pool.open(wait=True)
        try:
            await ingest_paths(pool, TENANT, [Path("knowledge/demo")])
        finally:
            await pool.close()
        async with server(url, secret) as base:
            fresh = itertools.count()  # a new thread per run, in every round
            tokens = MintedTokens(secret, tenant_id=TENANT, user_id="bench", locale="en-US")

            async with httpx.AsyncClient(base_url=base, timeout=60) as raw:

                async def raw_run(i: int) -> None:
                    body_json = {"message": {"content": questions[i % len(questions)][0]}}
                    path, headers = f"/v1/threads/raw-{next(fresh)}/runs", {"Authorization": f"Bearer {tokens()}"}
                    async with raw.stream("POST", path, json=body_json, headers=headers) as response:
                        body = b"".join([chunk async for chunk in response.aiter_bytes()])
                    assert b"event: end" in body

                async with AsyncChatbotClient(base, tokens) as client:

                    async def client_run(i: int) -> None:
                        await client.run(f"typed-{next(fresh)}", questions[i % len(questions)][0])

                    # Twice, alternating, so that a burst of load elsewhere on the machine shows up as
                    # disagreement between the rounds rather than as a difference between the clients.
                    for concurrency in (1, args.concurrency, 1, args.concurrency):
                        await timed("raw httpx, SSE body to end", args.runs, concurrency, raw_run)
                        await timed("AsyncChatbotClient.run", args.runs, concurrency, client_run)

            with ChatbotClient(base, tokens) as sync_client:

                async def sync_run(i: int) -> None:
                    sync_client.run(f"sync-{next(fresh)}", questions[i % len(questions)][0])  # blocks: one at a time

                await timed("ChatbotClient.run (sync)", args.runs, 1, sync_run)


def parse_args() -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
