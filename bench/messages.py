"""Newest-page latency of `GET /v1/threads/{id}/messages` beside the raw checkpoint read.

Builds one thread per depth (10, 100 and 1000 turns by default) by running the service's
graph directly (offline model; the demo knowledge base's labelled questions, English and
Persian, with their real retrieval results so answers quote and cite real chunks), then
times, interleaved in one run:
  endpoint   GET .../messages?limit=20 in-process through httpx's ASGI transport against
             `chatbot.app.create_app` (token check, tenant check, state read, paging, JSON)
  aget_state the app's compiled graph reading the same thread's state (the raw checkpoint read;
             since the model's list is bounded it no longer holds the whole transcript)
  record     `threads.transcript.read_messages`, the checkpoint read the endpoint makes: every
             kept version of the thread's per-run `turn` channel, deserialised

    .venv/bin/python -m bench.messages [--depths 10 100 1000] [--samples 40]

Uses CHATBOT_DATABASE_URL (migrated here; the bench's threads are deleted afterwards) or
starts an embedded Postgres in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import HumanMessage
from langgraph.constants import START

from bench._pg import bench_app
from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.agent.state import user_turn
from chatbot.caller import CallerContext
from chatbot.cli.common import mint_token
from chatbot.db.pool import Pool
from chatbot.db.saver import PooledPostgresSaver
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.responses import QuotedChunk
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.search import search_knowledge
from chatbot.threads.deletion import delete_threads
from chatbot.threads.transcript import read_messages
from chatbot.timestamps import now_rfc3339
from chatbot.turns import META_KEY

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
QUESTIONS = ROOT / "bench" / "data" / "retrieval_eval.jsonl"
TENANT = TenantId("bench-messages")
PAGE = 20


def load_questions() -> list[tuple[str, str]]:
    """Return (question, locale) pairs of the demo knowledge base's labelled questions."""
    items = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    return [(i["query"], "fa-IR" if i["document_id"].startswith("fa/") else "en-US") for i in items]


def cached_retriever(pool: Pool) -> Callable[[CallerContext, str], Awaitable[list[QuotedChunk]]]:
    """Return the service's retrieval, memoised per question (the thread repeats its questions)."""
    cache: dict[str, list[QuotedChunk]] = {}

    async def retrieve(caller: CallerContext, query: str) -> list[QuotedChunk]:
        if query not in cache:
            cache[query] = await search_knowledge(pool, caller, query, embeddings=None)
        return cache[query]

    return retrieve


async def build_thread(graph: Any, thread: str, turns: int, questions: Sequence[tuple[str, str]]) -> float:
    """Run `turns` turns on `thread` the way the runs endpoint does; return the seconds it took."""
    started = time.perf_counter()
    for _, (question, locale) in zip(range(turns), itertools.cycle(questions), strict=False):
        run_id = str(uuid.uuid4())
        config: dict[str, Any] = {
            "configurable": {"thread_id": thread},
            "metadata": {"tenant_id": TENANT, "user_id": "u1", "run_id": run_id},
        }
        message = HumanMessage(
            question,
            id=str(uuid.uuid4()),
            additional_kwargs={META_KEY: {"created_at": now_rfc3339(), "run_id": run_id}},
        )
        await graph.aupdate_state(config, user_turn(message), as_node=START)
        context = Context(
            tenant_id=TenantId(TENANT),
            user_id=UserId("u1"),
            locale=locale,
            run_id=RunId(run_id),
            thread_id=ThreadId(thread),
        )
        await graph.ainvoke(None, config, context=context, durability="exit")
    return time.perf_counter() - started


def percentile(values: Sequence[float], q: float) -> float:
    """Return the q-quantile (nearest rank) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(
    client: httpx.AsyncClient, app: Any, thread: str, headers: dict[str, str], samples: int
) -> tuple[list[float], list[float], list[float], int]:
    """Time the newest page, the state read and the record read in turn; return them in ms and the page's bytes."""
    endpoint: list[float] = []
    raw: list[float] = []
    record: list[float] = []
    size = 0
    config = {"configurable": {"thread_id": thread}}
    for i in range(samples + 3):  # the first three of each are warm-up
        started = time.perf_counter()
        response = await client.get(f"/v1/threads/{thread}/messages", params={"limit": PAGE}, headers=headers)
        elapsed = time.perf_counter() - started
        if response.status_code != 200 or len(response.json()["messages"]) != PAGE:
            raise RuntimeError(f"unexpected page: {response.status_code} {response.text[:200]}")
        size = len(response.content)
        started = time.perf_counter()
        await app.state.services.graph.aget_state(config)
        raw_elapsed = time.perf_counter() - started
        started = time.perf_counter()
        await read_messages(app.state.services.pool, ThreadId(thread))
        record_elapsed = time.perf_counter() - started
        if i >= 3:
            endpoint.append(elapsed * 1000)
            raw.append(raw_elapsed * 1000)
            record.append(record_elapsed * 1000)
    return endpoint, raw, record, size


async def main(depths: Sequence[int], samples: int) -> None:
    """Build the threads, measure them and print the table."""
    begun = time.perf_counter()
    async with bench_app("bench_messages", pool_min_size=2, pool_max_size=8) as (app, settings):
        pool: Pool = app.state.services.pool
        await ingest_paths(pool, TENANT, [KB])
        writer = build_graph(AgentDeps(retriever=cached_retriever(pool))).compile(
            checkpointer=PooledPostgresSaver(pool)  # no store: memory plays no part in a transcript read
        )
        run = uuid.uuid4().hex[:8]
        threads = {depth: ThreadId(f"bench-messages-{run}-{depth}") for depth in depths}
        questions = load_questions()
        try:
            for depth, thread in threads.items():
                seconds = await build_thread(writer, thread, depth, questions)
                print(f"built {depth:>5} turns in {seconds:6.1f} s ({seconds / depth * 1000:.0f} ms/turn)")
            token = mint_token(settings, tenant=TENANT, user=UserId("u1"), locale="en-US", ttl=3600)
            headers = {"Authorization": f"Bearer {token}"}
            transport = httpx.ASGITransport(app=app)
            rows = []
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                for depth, thread in threads.items():
                    rows.append((depth, *await measure(client, app, thread, headers, samples)))
        finally:
            await delete_threads(pool, list(threads.values()))
    print()
    print(f"newest page (limit {PAGE}), {samples} samples each, in-process; ms")
    print(
        f"{'turns':>6} {'messages':>9} {'page KB':>8} | {'GET p50':>8} {'p95':>7} | {'aget_state p50':>15} {'p95':>7}"
        f" | {'record p50':>11} {'p95':>7} | {'GET - record':>12}"
    )
    for depth, endpoint, raw, record, size in rows:
        e50, r50, t50 = statistics.median(endpoint), statistics.median(raw), statistics.median(record)
        print(
            f"{depth:>6} {2 * depth:>9} {size / 1024:>8.1f} | {e50:>8.1f} {percentile(endpoint, 0.95):>7.1f} |"
            f" {r50:>15.1f} {percentile(raw, 0.95):>7.1f} | {t50:>11.1f} {percentile(record, 0.95):>7.1f} |"
            f" {e50 - t50:>12.1f}"
        )
    print(f"\ntotal {time.perf_counter() - begun:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 100, 1000], help="turns per thread")
    parser.add_argument("--samples", type=int, default=40, help="timed requests per depth and target")
    args = parser.parse_args()
    asyncio.run(main(args.depths, args.samples))
