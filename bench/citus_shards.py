"""Count the shards each answered run touches on a real Citus cluster, and the connections it holds.

Drives a real `chatbot serve` (offline model) against a Citus database of its own on the
cluster of `scripts/citus.sh` (`make citus`), one run at a time: before each run the
workers' `pg_stat_statements` and the coordinator's `citus_stat_statements` are reset, after
it (and after the run's memory job, which its replica works at once) they are read back.
Prints per answered run:
- the distinct shards its statements touched on the workers (shard tables named in the
  statements the coordinator sent them), by co-location group;
- the statements Citus ran on more than one shard (the coordinator's
  `citus_stat_statements` rows without a partition key, on a distributed table).
The replica's background scans (the memory jobs' pickup, the store's TTL sweep) are
multi-shard by design and never on a run's path: they are counted apart.

With `--in-flight 100 500` it then starts that many runs at once (slow offline streams) and
prints the peak connections on the coordinator and on each worker: the budget of
docs/scaling.md.

Usage: python -m bench.citus_shards [--runs 20] [--coordinator URL] [--in-flight 100 500] [--show]
The coordinator's URL defaults to `scripts/citus.sh url` (postgresql://postgres@127.0.0.1:9700/postgres).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from pydantic import SecretStr
from tests.fixtures.postgres import citus_workers, create_database, drop_database

from bench.runs import server
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.migrate import migrate
from chatbot.db.placement import PLACEMENTS, apply_placement
from chatbot.db.pool import open_pool
from chatbot.retrieval.ingest import ingest_paths

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
QUESTIONS = (
    "What does travel insurance cover for medical costs abroad?",
    "How do I file a car body claim and which documents do I need?",
)
GROUP = {p.table: p.group for p in PLACEMENTS if p.kind == "distributed"}
# A shard is the table's name and its shard id: `checkpoints_102008`.
SHARD = re.compile(r"\b(" + "|".join(sorted(GROUP, key=len, reverse=True)) + r")_(\d+)\b")
# The replica's background work (tests/db/test_statement_audit.py's BACKGROUND): multi-shard by design.
BACKGROUND = ("memory_jobs where claimed_until <", "delete from store where expires_at")
# Not the service's: this bench's own reads and Citus' distributed deadlock detection.
NOT_THE_SERVICE = ("pending_jobs", "stat_statements", "waiting_pid")


@dataclass
class RunShards:
    """What one run touched."""

    shards: set[tuple[str, str]] = field(default_factory=set)  # (table, shard id)
    fan_out: list[str] = field(default_factory=list)  # statements on more than one shard
    background: int = 0
    steps: Counter[str] = field(default_factory=Counter)  # what the coordinator sent the workers, and how often


def node_url(coordinator: str, host: str, port: int, dbname: str) -> str:
    """Return the URL of one node's database, with the coordinator's user."""
    params = psycopg.conninfo.conninfo_to_dict(coordinator)
    params.update(host=host, port=str(port), dbname=dbname)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def is_background(query: str) -> bool:
    """Tell a replica's background scan from a run's statement."""
    flat = " ".join(query.split()).lower()
    return any(key in flat for key in BACKGROUND)


class Cluster:
    """The coordinator's database and the same database on every worker."""

    def __init__(self, url: str, workers: list[str]) -> None:
        self.url = url
        self.workers = workers

    def reset(self) -> None:
        """Forget every statement counted so far, on every node."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("select citus_stat_statements_reset()")
        for worker in self.workers:
            with psycopg.connect(worker, autocommit=True) as conn:
                conn.execute("select pg_stat_statements_reset()")

    def read(self) -> RunShards:
        """Return the shards and multi-shard statements counted since the last reset."""
        found = RunShards()
        for worker in self.workers:
            with psycopg.connect(worker, autocommit=True) as conn:
                rows = conn.execute(
                    "select query, toplevel, calls from pg_stat_statements where dbid = (select oid from pg_database"
                    " where datname = current_database())"
                ).fetchall()
            for query, toplevel, calls in rows:
                if any(key in str(query) for key in NOT_THE_SERVICE):
                    continue
                if is_background(str(query)):
                    found.background += 1
                    continue
                found.shards.update(SHARD.findall(str(query)))
                if toplevel:  # sent by the coordinator (not run inside a function the worker was handed)
                    found.steps[" ".join(SHARD.sub(r"\1", str(query)).split())[:160]] += int(calls)
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "select query, executor::text, partition_key, calls from citus_stat_statements"
                " where dbid = (select oid from pg_database where datname = current_database())"
            ).fetchall()
        for query, executor, partition_key, _calls in rows:
            text = str(query)
            # Router statements carry the distribution value they were routed by; a statement
            # on a reference table alone carries none but is one placement.
            if partition_key is None and not is_background(text) and any(t in text for t in GROUP):
                found.fan_out.append(f"[{executor}] {' '.join(text.split())[:300]}")
        return found


async def one_run(client: httpx.AsyncClient, base: str, token: str, thread: str, question: str) -> str:
    """Run one turn over SSE to its end; return how it ended: "answered", the end's status, or the error."""
    async with client.stream(
        "POST",
        f"{base}/v1/threads/{thread}/runs",
        json={"message": {"content": question}},
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
        timeout=300,
    ) as response:
        if response.status_code != 200:
            return f"http {response.status_code}"
        body = "".join([chunk async for chunk in response.aiter_text()])
    for event in ("end", "error"):
        _, found, rest = body.partition(f"event: {event}\n")
        if found:
            data = json.loads(rest.partition("data: ")[2].partition("\n")[0] or "{}")
            if event == "end":
                return str(data.get("status"))
            return f"error {data.get('code') or data.get('reason') or data.get('title')}"
    return "no end"


async def memory_settled(url: str, thread: str) -> None:
    """Wait until the thread's memory job is done (its row gone), at most 5 s."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(100):
            row = await (
                await conn.execute("select count(*) as pending_jobs from memory_jobs where thread_id = %s", (thread,))
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            await asyncio.sleep(0.05)


async def shards_per_run(cluster: Cluster, base: str, token: str, runs: int, show: bool) -> None:
    """Measure `runs` answered runs one at a time (new threads and second turns alternately)."""
    counts: list[int] = []
    by_group: dict[str, list[int]] = defaultdict(list)
    fan_out: Counter[str] = Counter()
    steps: list[int] = []
    background = 0
    answered = 0
    async with httpx.AsyncClient() as client:
        # A first run warms the replica (its system prompt row, the pool) outside the figures.
        await one_run(client, base, token, "warm-up", QUESTIONS[0])  # how it ends does not matter
        await memory_settled(cluster.url, "warm-up")
        for i in range(runs):
            thread = f"shards-{i // 2}"
            cluster.reset()
            ok = await one_run(client, base, token, thread, QUESTIONS[i % 2]) == "answered"
            await memory_settled(cluster.url, thread)
            found = cluster.read()
            if not ok:
                print(f"  run {i}: not answered", flush=True)
                continue
            answered += 1
            counts.append(len(found.shards))
            groups = Counter(GROUP[table] for table, _ in found.shards)
            for group in {g for g in GROUP.values() if g}:
                by_group[str(group)].append(groups.get(group, 0))
            fan_out.update(found.fan_out)
            background += found.background
            steps.append(sum(found.steps.values()))
            if show:
                print(f"  run {i} ({'first' if i % 2 == 0 else 'second'} turn): {len(found.shards)} shards", flush=True)
                for table, shard in sorted(found.shards):
                    print(f"    {table}_{shard}")
                print(f"  run {i}: {sum(found.steps.values())} statements from the coordinator to the workers")
                for text, n in sorted(found.steps.items()):
                    print(f"    {n} x {text}")
    print(f"{answered} of {runs} runs answered")
    if counts:
        print(
            f"distinct shards per answered run: median {statistics.median(counts):g}, min {min(counts)},"
            f" max {max(counts)} ("
            + ", ".join(f"{g} {statistics.median(v):g}" for g, v in sorted(by_group.items()))
            + " by co-location group, medians)"
        )
    if steps:
        print(f"statements from the coordinator to the workers per answered run: median {statistics.median(steps):g}")
    print(f"run-path statements on more than one shard: {len(fan_out)} distinct, {sum(fan_out.values())} in all")
    for text, n in fan_out.most_common():
        print(f"  {n} x {text}")
    print(f"background statements seen (multi-shard by design, off the run path): {background}")


async def in_flight(url: str, worker_urls: list[str], base: str, tokens: list[str], n: int) -> None:
    """Start `n` runs at once; print the answered count and the peak connections on each node."""
    peaks = [0] * (1 + len(worker_urls))
    stop = asyncio.Event()

    async def watch() -> None:
        conns = [await psycopg.AsyncConnection.connect(u, autocommit=True) for u in (url, *worker_urls)]
        try:
            while not stop.is_set():
                for i, conn in enumerate(conns):
                    row = await (
                        await conn.execute(
                            "select count(*) from pg_stat_activity where datname = current_database()"
                            " and pid <> pg_backend_pid()"
                        )
                    ).fetchone()
                    peaks[i] = max(peaks[i], int(row[0]) if row else 0)
                await asyncio.sleep(0.05)
        finally:
            for conn in conns:
                await conn.close()

    watcher = asyncio.create_task(watch())
    started = time.perf_counter()
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits) as client:
        outcomes = await asyncio.gather(
            *(one_run(client, base, tokens[i % len(tokens)], f"flight-{n}-{i}", QUESTIONS[i % 2]) for i in range(n)),
            return_exceptions=True,
        )
    wall = time.perf_counter() - started
    stop.set()
    await watcher
    ends = Counter(o if isinstance(o, str) else type(o).__name__ for o in outcomes)
    answered = ends.pop("answered", 0)
    others = f" (others: {dict(ends)})" if ends else ""
    workers = ", ".join(f"worker {i + 1} {p}" for i, p in enumerate(peaks[1:]))
    print(
        f"  {n:>4} runs in flight: answered {answered}{others}, peak connections: coordinator {peaks[0]}"
        f" (this database, the replica's pool, lock sessions and the watcher), {workers} (from the coordinator)"
        f" | wall {wall:.1f} s",
        flush=True,
    )


async def main(args: argparse.Namespace) -> None:
    """Make a Citus database, serve it, measure, drop it."""
    workers = citus_workers(args.coordinator)
    if not workers:
        raise SystemExit(f"{args.coordinator} is not a Citus coordinator with workers (run `make citus`)")
    url = create_database(args.coordinator)  # a Citus database with the workers registered in it
    await migrate(url)
    await apply_placement(url)
    name = str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])
    worker_urls = [node_url(args.coordinator, host, port, name) for host, port in workers]
    try:
        with psycopg.connect(url, autocommit=True) as conn:  # Citus creates it on the workers too
            conn.execute("create extension if not exists pg_stat_statements")
        secret = secrets.token_urlsafe(48)
        settings = Settings(service_secret=SecretStr(secret), database_url=url)
        tokens = [mint_token(settings, tenant="acme", user=f"user-{i}", locale="en-US", ttl=3000) for i in range(50)]
        async with open_pool(settings, max_size=2) as pool:
            await ingest_paths(pool, "acme", [KB])
        cluster = Cluster(url, worker_urls)
        print(f"Citus database {name}: coordinator {args.coordinator}, {len(workers)} workers", flush=True)
        async with server(url, secret) as base:
            await shards_per_run(cluster, base, tokens[0], args.runs, args.show)
        if args.in_flight:
            async with server(url, secret, CHATBOT_OFFLINE_TOKEN_DELAY_MS=str(args.delay_ms)) as base:
                print(f"runs started together, offline model {args.delay_ms} ms between tokens, one replica:")
                for n in args.in_flight:
                    await in_flight(url, worker_urls, base, tokens, n)
    finally:
        drop_database(args.coordinator, url)


def parse_args() -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--coordinator", default="postgresql://postgres@127.0.0.1:9700/postgres")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--in-flight", type=int, nargs="*", default=[])
    parser.add_argument("--delay-ms", type=int, default=60)
    parser.add_argument("--show", action="store_true", help="list each run's shards")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
