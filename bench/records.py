"""The run record: what it adds to a thread's storage, and what reading it back costs.

Builds one thread per depth (10, 100 and 400 turns by default) through the runs endpoint,
in-process (httpx's ASGI transport against `chatbot.app.create_app`, offline model, the
demo knowledge base so runs retrieve and cite real chunks), then prints:
  record bytes   the `record` string stored inline in each run's last checkpoint
  GET newest     `GET /v1/threads/{id}/runs/{run_id}` of the thread's newest run
  GET first      the same for the thread's first run (a window of one message)

    .venv/bin/python -m bench.records [--depths 10 100 400] [--samples 20]

Uses CHATBOT_DATABASE_URL (migrated here; the bench's threads are deleted afterwards) or
starts an embedded Postgres in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import httpx

from bench._pg import bench_app
from chatbot.cli.common import mint_token
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.retrieval.ingest import ingest_paths
from chatbot.threads.deletion import delete_threads

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
QUESTIONS = ROOT / "bench" / "data" / "retrieval_eval.jsonl"
TENANT = TenantId("bench-records")
_RECORD_BYTES = (
    "select octet_length(checkpoint -> 'channel_values' ->> 'record') as n from checkpoints "
    "where thread_id = %s and checkpoint_ns = '' and checkpoint -> 'channel_values' ->> 'record' like '{%%'"
)


async def timed_get(client: httpx.AsyncClient, path: str, headers: dict[str, str], samples: int) -> list[float]:
    """Return the latencies (ms) of `samples` GETs of `path`."""
    elapsed = []
    for _ in range(samples):
        started = time.perf_counter()
        response = await client.get(path, headers=headers)
        elapsed.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
    return elapsed


async def main(depths: Sequence[int], samples: int) -> None:
    """Build the threads, measure them and print the table."""
    questions = [json.loads(line)["query"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    async with bench_app("bench_records") as (app, settings):
        await ingest_paths(app.state.services.pool, TENANT, [KB])
        token = mint_token(settings, tenant=TENANT, user=UserId("u1"), locale="en-US", ttl=3600)
        headers = {"Authorization": f"Bearer {token}"}
        prefix = f"bench-records-{uuid.uuid4().hex[:8]}"
        threads = {depth: ThreadId(f"{prefix}-{depth}") for depth in depths}
        rows = []
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60) as client:
                for depth, thread in threads.items():
                    run_ids = []
                    for turn in range(depth):
                        response = await client.post(
                            f"/v1/threads/{thread}/runs",
                            json={"message": {"content": questions[turn % len(questions)]}},
                            headers={"Accept": "application/json", **headers},
                        )
                        run_ids.append(response.json()["run_id"])
                    async with app.state.services.pool.connection() as conn:
                        sizes = [r["n"] for r in await (await conn.execute(_RECORD_BYTES, (thread,))).fetchall()]
                    newest = await timed_get(client, f"/v1/threads/{thread}/runs/{run_ids[-1]}", headers, samples)
                    first = await timed_get(client, f"/v1/threads/{thread}/runs/{run_ids[0]}", headers, samples)
                    rows.append((depth, sizes, newest, first))
        finally:
            await delete_threads(app.state.services.pool, list(threads.values()))
    print(f"run records, {samples} GETs per cell, in-process; bytes and ms")
    print(f"{'turns':>6} | {'record bytes mean':>17} {'max':>6} | {'GET newest p50':>14} | {'GET first p50':>13}")
    for depth, sizes, newest, first in rows:
        print(
            f"{depth:>6} | {statistics.mean(sizes):>17.0f} {max(sizes):>6} | {statistics.median(newest):>14.1f} |"
            f" {statistics.median(first):>13.1f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 100, 400], help="turns per thread")
    parser.add_argument("--samples", type=int, default=20, help="timed GETs per depth and run")
    args = parser.parse_args()
    asyncio.run(main(args.depths, args.samples))
