"""Measure runs/s and p50/p99 latency of the runs endpoint against the same graph in-process.

Targets, measured side by side in one run (slices interleaved, order rotating):
  http           a real `chatbot serve` process on 127.0.0.1 (offline model), SSE read to `end`
  inproc-stock   the graph compiled here with `AsyncPostgresSaver` (its instance lock)
  inproc-pooled  the same graph with `chatbot.db.saver.PooledPostgresSaver` (no lock on a pool)
Both in-process targets run the service's two steps (the user message as the output of
START, then `astream(durability="exit")`), on one pool sized like the server's. Every
worker has its own user and threads; questions are the labelled ones of the demo
knowledge base (bench/data/retrieval_eval.jsonl). Also prints the checkpoint rows one run
writes.

Usage: python -m bench.runs [--runs-c1 200] [--runs-c16 400] [--slices 2] [--targets ...]
Uses CHATBOT_DATABASE_URL (migrated here; tenant "acme" gets the demo knowledge base) or
starts an embedded Postgres under a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_type_hints

import httpx
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.constants import START
from langgraph.store.postgres.aio import AsyncPostgresStore
from pydantic import SecretStr

import chatbot.services
from bench._pg import bench_database
from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.agent.state import user_turn
from chatbot.caller import CallerContext
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool, connection_kwargs, make_pool
from chatbot.db.saver import PooledPostgresSaver
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.memory.writer import MemoryWriter
from chatbot.responses import QuotedChunk
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.search import search_knowledge
from chatbot.timestamps import now_rfc3339
from chatbot.turns import META_KEY

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
QUESTIONS = ROOT / "bench" / "data" / "retrieval_eval.jsonl"
TENANT = TenantId("acme")
TARGETS = ("http", "inproc-stock", "inproc-pooled")
CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")

RunOnce = Callable[[str, str, str, str], Awaitable[None]]  # (user, thread, question, locale)


@dataclass
class Tally:
    """Latencies and wall time of one target at one concurrency."""

    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    failed: int = 0

    def line(self, name: str) -> str:
        """Return the target's figures as one line."""
        ms = sorted(x * 1000 for x in self.latencies)
        p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
        return (
            f"  {name:<14} {len(ms) / self.wall:7.1f} runs/s   p50 {statistics.median(ms):6.1f} ms"
            f"   p99 {p99:6.1f} ms   ({len(ms)} runs, {self.failed} failed)"
        )


class TimedLock(asyncio.Lock):
    """The stock saver's lock, timed: how long calls waited for it and held it."""

    def __init__(self) -> None:
        """Start with zeroed counters."""
        super().__init__()
        self.reset()

    def reset(self) -> None:
        """Zero the counters."""
        self.acquisitions, self.waited, self.held, self._since = 0, 0.0, 0.0, 0.0

    async def acquire(self) -> Literal[True]:
        """Acquire the lock, adding the time spent waiting for it."""
        started = time.perf_counter()
        await super().acquire()
        self._since = time.perf_counter()
        self.waited += self._since - started
        self.acquisitions += 1
        return True

    def release(self) -> None:
        """Release the lock, adding the time it was held."""
        self.held += time.perf_counter() - self._since
        super().release()


def load_questions() -> list[tuple[str, str]]:
    """Return (question, locale) pairs of the demo knowledge base's labelled questions."""
    items = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    return [(i["query"], "fa-IR" if i["document_id"].startswith("fa/") else "en-US") for i in items]


SERVER_PIDS: dict[str, int] = {}  # base URL -> pid of the `chatbot serve` behind it


def free_port() -> int:
    """Return a free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def server(url: str, secret: str, *, workers: int = 1, **settings: str) -> AsyncIterator[str]:
    """Run `chatbot serve` on 127.0.0.1 until the block ends; yield its base URL.

    `settings` are extra `CHATBOT_*` variables, e.g. `CHATBOT_OFFLINE_TOKEN_DELAY_MS="60"`;
    `workers` is `chatbot serve --workers` (one replica, that many processes).
    """
    port = free_port()
    env = {
        **os.environ,
        "CHATBOT_DATABASE_URL": url,
        "CHATBOT_SERVICE_SECRET": secret,
        "CHATBOT_LOG_LEVEL": "WARNING",
        "CHATBOT_MODEL": "offline",
        "CHATBOT_OFFLINE_TOKEN_DELAY_MS": "0",
        **settings,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chatbot.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    SERVER_PIDS[base] = process.pid
    try:
        async with httpx.AsyncClient() as probe:
            for _ in range(300):
                if process.returncode is not None:
                    raise RuntimeError(f"chatbot serve exited with {process.returncode}")
                try:
                    if (await probe.get(f"{base}/readyz", timeout=1)).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("chatbot serve did not become ready")
        yield base
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                os.kill(process.pid, signal.SIGKILL)
                await process.wait()


def http_runner(client: httpx.AsyncClient, settings: Settings) -> RunOnce:
    """Return a run over HTTP: POST the message, read the SSE stream to its `end`."""
    tokens: dict[tuple[str, str], str] = {}

    async def run(user: str, thread: str, question: str, locale: str) -> None:
        token = tokens.get((user, locale))
        if token is None:
            token = mint_token(settings, tenant=TENANT, user=UserId(user), locale=locale, ttl=3600)
            tokens[(user, locale)] = token
        body_json = {"message": {"content": question}}
        async with client.stream(
            "POST", f"/v1/threads/{thread}/runs", json=body_json, headers={"Authorization": f"Bearer {token}"}
        ) as response:
            body = b"".join([chunk async for chunk in response.aiter_bytes()])
        if response.status_code != 200 or b"event: end" not in body:
            raise RuntimeError(f"run failed: {response.status_code} {body[-200:]!r}")

    return run


def inproc_runner(graph: Any, durability: str = "exit") -> RunOnce:
    """Return a run in-process: the service's two steps, without HTTP, locks or access checks."""

    async def run(user: str, thread: str, question: str, locale: str) -> None:
        run_id = str(uuid.uuid4())
        config = {
            "configurable": {"thread_id": thread},
            "metadata": {"tenant_id": TENANT, "user_id": user, "run_id": run_id},
        }
        message = HumanMessage(
            content=question,
            id=str(uuid.uuid4()),
            additional_kwargs={META_KEY: {"created_at": now_rfc3339(), "run_id": run_id}},
        )
        await graph.aupdate_state(config, user_turn(message), as_node=START)
        context = Context(
            tenant_id=TenantId(TENANT),
            user_id=UserId(user),
            locale=locale,
            run_id=RunId(run_id),
            thread_id=ThreadId(thread),
        )
        outcome = None
        async for mode, chunk in graph.astream(
            None, config, context=context, stream_mode=["custom", "updates"], durability=durability
        ):
            if mode == "updates" and "generate" in chunk:
                outcome = chunk["generate"]["outcome"]
        if outcome is None:
            raise RuntimeError("run ended without an outcome")

    return run


async def run_slice(
    run: RunOnce,
    label: str,
    runs: int,
    concurrency: int,
    questions: list[tuple[str, str]],
    turns_per_thread: int,
    tally: Tally,
) -> None:
    """Run `runs` runs with `concurrency` workers, each on its own user and threads."""
    remaining = itertools.count()
    batch = uuid.uuid4().hex[:6]

    async def worker(w: int) -> None:
        user = f"bench-{label}-{batch}-w{w}"
        thread, turns = f"{user}-{uuid.uuid4().hex[:8]}", 0
        for n in iter(lambda: next(remaining), None):
            if n >= runs:
                return
            if turns == turns_per_thread:  # a fresh thread keeps every target at the same thread length
                thread, turns = f"{user}-{uuid.uuid4().hex[:8]}", 0
            question, locale = questions[(n * 7 + w) % len(questions)]
            started = time.perf_counter()
            try:
                await run(user, thread, question, locale)
            except Exception as exc:
                tally.failed += 1
                if tally.failed <= 3:
                    print(f"  {label}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            finally:
                turns += 1
            tally.latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    tally.wall += time.perf_counter() - started


async def checkpoint_rows(pool: Pool, thread: str) -> dict[str, int]:
    """Return the checkpoint rows of one thread, per table."""
    async with pool.connection() as conn:
        counts = {}
        for table in CHECKPOINT_TABLES:
            row = await (
                await conn.execute(f"select count(*) as n from {table} where thread_id = %s", (thread,))
            ).fetchone()
            counts[table] = int(row["n"]) if row else 0
    return counts


async def rows_per_run(pool: Pool, run: RunOnce, label: str, questions: list[tuple[str, str]]) -> None:
    """Print the checkpoint rows the first and the second run of a fresh thread add."""
    user = "bench-rows-" + "".join(c if c.isalnum() else "-" for c in label)
    thread = f"{user}-{uuid.uuid4().hex[:8]}"
    before = await checkpoint_rows(pool, thread)
    for turn in (1, 2):
        await run(user, thread, *questions[turn])
        after = await checkpoint_rows(pool, thread)
        added = {t: after[t] - before[t] for t in CHECKPOINT_TABLES}
        print(
            f"  {label:<22} run {turn}: "
            + "  ".join(f"{t} +{n}" for t, n in added.items())
            + f"  (total +{sum(added.values())})"
        )
        before = after


async def main(args: argparse.Namespace) -> None:
    """Set up the database, the server and the in-process graphs; measure; print."""
    questions = load_questions()
    secret = secrets.token_urlsafe(48)
    settings = Settings(service_secret=SecretStr(secret), database_url="postgresql:///unused")
    async with bench_database("bench") as url:
        pool = make_pool(url, settings, name="bench", min_size=2, max_size=settings.pool_max_size)
        locks = Locks(url, connection_kwargs(settings))
        await pool.open(wait=True)
        try:
            await ingest_paths(pool, TENANT, [KB])
            store = AsyncPostgresStore(pool)
            memory = MemoryWriter(pool=pool, locks=locks, max_facts=settings.memory_max_facts)

            async def retriever(caller: CallerContext, query: str) -> list[QuotedChunk]:
                return await search_knowledge(pool, caller, query)

            deps = AgentDeps(settings=settings, retriever=retriever, memory_sink=memory.submit)
            stock = AsyncPostgresSaver(pool)
            stock.lock = lock = TimedLock()
            graphs = {"inproc-stock": stock, "inproc-pooled": PooledPostgresSaver(pool)}
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
            async with (
                server(url, secret) as base,
                httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client,
            ):
                runners: dict[str, RunOnce] = {"http": http_runner(client, settings)}
                for name, saver in graphs.items():
                    runners[name] = inproc_runner(build_graph(deps).compile(checkpointer=saver, store=store))
                targets = [t for t in args.targets.split(",") if t]
                print(f"chatbot serve uses {_server_saver()}; 2 shared cores: compare ratios, not absolutes")
                await measure(runners, targets, args, questions, memory, lock)
                print("\ncheckpoint rows per run (one fresh thread, the service's two steps)")
                await rows_per_run(pool, runners["http"], "http (exit)", questions)
                await rows_per_run(
                    pool,
                    inproc_runner(
                        build_graph(deps).compile(checkpointer=graphs["inproc-pooled"], store=store), durability="async"
                    ),
                    "inproc durability=async",
                    questions,
                )
            await memory.drain(30)
        finally:
            await locks.close()
            await pool.close()


def _server_saver() -> str:
    """Return which saver class the app's services build (the server runs the same code)."""
    saver = get_type_hints(chatbot.services.Services)["saver"]
    return "PooledPostgresSaver" if issubclass(saver, PooledPostgresSaver) else "AsyncPostgresSaver"


async def measure(
    runners: dict[str, RunOnce],
    targets: list[str],
    args: argparse.Namespace,
    questions: list[tuple[str, str]],
    memory: MemoryWriter,
    lock: TimedLock,
) -> None:
    """Run every target at concurrency 1 and 16, slices interleaved; print figures and ratios."""
    for name in targets:  # warm-up: connections, prepared statements, imports; discarded
        await run_slice(runners[name], f"warm-{name}", 16, 4, questions, args.turns_per_thread, Tally())
    for concurrency, total in ((1, args.runs_c1), (16, args.runs_c16)):
        tallies = {name: Tally() for name in targets}
        lock.reset()
        per_slice = total // args.slices
        for s in range(args.slices):
            for name in targets[s % len(targets) :] + targets[: s % len(targets)]:
                await run_slice(
                    runners[name], name, per_slice, concurrency, questions, args.turns_per_thread, tallies[name]
                )
                # Background memory writes of this slice must not bill the next target.
                await memory.drain(30)
                await asyncio.sleep(args.settle)
        print(f"\nconcurrency {concurrency} ({per_slice * args.slices} runs per target, {args.slices} slices)")
        for name in targets:
            print(tallies[name].line(name))
        print_ratios(tallies)
        stock = tallies.get("inproc-stock")
        if stock and stock.latencies and lock.acquisitions:
            runs, mean = len(stock.latencies), statistics.fmean(stock.latencies)
            print(
                f"  inproc-stock saver lock: {lock.acquisitions / runs:.1f} acquisitions/run, held "
                f"{lock.held / runs * 1000:.1f} ms/run, waited {lock.waited / runs * 1000:.1f} ms/run "
                f"= {lock.waited / runs / mean:.0%} of the mean run ({mean * 1000:.1f} ms)"
            )


def print_ratios(tallies: dict[str, Tally]) -> None:
    """Print HTTP against in-process, and the pooled saver against the stock one."""

    def rate(name: str) -> float:
        return len(tallies[name].latencies) / tallies[name].wall

    def p50(name: str) -> float:
        return statistics.median(tallies[name].latencies)

    pairs = [("http", "inproc-stock"), ("http", "inproc-pooled"), ("inproc-pooled", "inproc-stock")]
    for a, b in pairs:
        if a in tallies and b in tallies and tallies[a].latencies and tallies[b].latencies:
            print(f"  {a}/{b}: runs/s x{rate(a) / rate(b):.2f}, p50 x{p50(a) / p50(b):.2f}")


def parse_args() -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs-c1", type=int, default=200, help="runs per target at concurrency 1")
    parser.add_argument("--runs-c16", type=int, default=400, help="runs per target at concurrency 16")
    parser.add_argument("--slices", type=int, default=2, help="interleaved slices per target")
    parser.add_argument("--turns-per-thread", type=int, default=10, help="runs on a thread before a fresh one")
    parser.add_argument("--settle", type=float, default=0.5, help="pause after each slice (seconds)")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {TARGETS}")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
