"""Count the shards each answered run touches on a real Citus cluster, and the connections it holds.

Drives a real `chatbot serve` (offline model) against a Citus database of its own on the
cluster of `scripts/citus.sh` (`make citus`), one run at a time, six turns to a thread
in a small context window, all but the first long messages (so that recall indexes and searches
the earlier turns once they no longer fit; `--turns`, `--context-tokens`): before each run the
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

The offline model costs nothing, so no budget is reserved and no usage written (a priced
model's run adds the tenant's `budgets`, `budget_counters`, `budget_reservations` and
`model_usage_daily` shards: docs/scaling.md).

Usage: python -m bench.citus_shards [--runs 20] [--turns 6] [--coordinator URL] [--in-flight 100 500] [--show]
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
from tests.fixtures.postgres import citus_workers, create_database, drop_database, worker_urls

from bench.runs import server
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.migrate import migrate
from chatbot.db.placement import PLACEMENTS, apply_placement
from chatbot.db.pool import open_pool
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
QUESTIONS = (
    "What does travel insurance cover for medical costs abroad?",
    "How do I file a car body claim and which documents do I need?",
)
# A long message, as a customer describing an accident writes one: with the small context
# window, a few of these leave the thread's earlier turns out of it, and recall searches them.
LONG = (
    "Last Tuesday evening another car hit the rear of mine at a red light on Valiasr street; the other"
    " driver admitted it, we called the police, took photos of both cars and the plates, and exchanged"
    " policy numbers. The bumper, the boot lid and a rear light are damaged and the car still drives."
    " Which documents do I need for the car body claim, and how long does the review usually take?"
)
GROUP = {p.table: p.group for p in PLACEMENTS if p.kind == "distributed"}
# A shard is the table's name and its shard id: `checkpoints_102008`.
SHARD = re.compile(r"\b(" + "|".join(sorted(GROUP, key=len, reverse=True)) + r")_(\d+)\b")
# The replica's background work (tests/db/test_statement_audit.py's BACKGROUND): multi-shard by design.
# Read on the coordinator as sent, and on the workers as Citus deparses it for each shard
# (`FROM public.memory_jobs memory_jobs WHERE (claimed_until OPERATOR(pg_catalog.<) ...`).
BACKGROUND = (
    re.compile(r"from memory_jobs(?: memory_jobs)? where \(*claimed_until <"),
    re.compile(r"delete from store(?: store)? where \(*expires_at"),
    # The budget holds' sweep (ops/sweeper.py): which tenants have expired holds.
    re.compile(r"select distinct tenant_id from budget_reservations(?: budget_reservations)? where \(*expires_at"),
)
_OPERATOR = re.compile(r"operator\(pg_catalog\.([^)]+)\)")
# Not the service's: this bench's own reads and Citus' distributed deadlock detection.
NOT_THE_SERVICE = ("pending_jobs", "stat_statements", "waiting_pid")


# Peak connections: the coordinator's client backends on the database (not this bench's own,
# nor Citus' maintenance daemon), and on a worker the connections the coordinator opened, with
# the coordinator backends they belong to (each names its backend's global pid).
_CLIENTS = (
    "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
    " and backend_type = 'client backend'"
)
_FROM_THE_COORDINATOR = (
    "select count(*), count(distinct application_name) from pg_stat_activity where datname = current_database()"
    " and application_name like 'citus_internal gpid=%'"
)


@dataclass
class RunShards:
    """What one run touched."""

    shards: set[tuple[str, str]] = field(default_factory=set)  # (table, shard id)
    fan_out: list[str] = field(default_factory=list)  # statements on more than one shard
    background: int = 0
    steps: Counter[str] = field(default_factory=Counter)  # what the coordinator sent the workers, and how often


def is_background(query: str) -> bool:
    """Tell a replica's background scan from a run's statement."""
    flat = _OPERATOR.sub(r"\1", " ".join(SHARD.sub(r"\1", query).split()).lower()).replace("public.", "")
    return any(key.search(flat) for key in BACKGROUND)


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


async def shards_per_run(cluster: Cluster, base: str, token: str, runs: int, turns: int, show: bool) -> None:
    """Measure `runs` answered runs one at a time, `turns` to a thread."""
    counts: list[int] = []
    by_group: dict[str, list[int]] = defaultdict(list)
    fan_out: Counter[str] = Counter()
    steps: list[int] = []
    background = 0
    answered = 0
    tables: Counter[str] = Counter()  # in how many answered runs each table was touched
    async with httpx.AsyncClient() as client:
        # A first run warms the replica (its system prompt row, the pool) outside the figures.
        await one_run(client, base, token, "warm-up", QUESTIONS[0])  # how it ends does not matter
        await memory_settled(cluster.url, "warm-up")
        for i in range(runs):
            thread = f"shards-{i // turns}"
            cluster.reset()
            question = QUESTIONS[i % 2] if i % turns == 0 else LONG
            ended = await one_run(client, base, token, thread, question)
            await memory_settled(cluster.url, thread)
            found = cluster.read()
            if ended != "answered":
                print(f"  run {i}: not answered ({ended})", flush=True)
                continue
            answered += 1
            counts.append(len(found.shards))
            tables.update({table for table, _ in found.shards})
            groups = Counter(GROUP[table] for table, _ in found.shards)
            for group in {g for g in GROUP.values() if g}:
                by_group[str(group)].append(groups.get(group, 0))
            fan_out.update(found.fan_out)
            background += found.background
            steps.append(sum(found.steps.values()))
            if show:
                print(f"  run {i} (turn {i % turns + 1}): {len(found.shards)} shards", flush=True)
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
    if tables:
        print("tables touched (in how many answered runs): " + ", ".join(f"{t} {n}" for t, n in sorted(tables.items())))
    if steps:
        print(f"statements from the coordinator to the workers per answered run: median {statistics.median(steps):g}")
    print(f"run-path statements on more than one shard: {len(fan_out)} distinct, {sum(fan_out.values())} in all")
    for text, n in fan_out.most_common():
        print(f"  {n} x {text}")
    print(f"background statements seen (multi-shard by design, off the run path): {background}")


async def in_flight(url: str, worker_urls: list[str], base: str, tokens: list[str], n: int) -> None:
    """Start `n` runs at once; print the answered count and the peak connections on each node."""
    peaks = [0] * (1 + len(worker_urls))
    backends = [0] * len(worker_urls)  # distinct coordinator backends with a connection to each worker
    stop = asyncio.Event()

    async def watch() -> None:
        conns = [await psycopg.AsyncConnection.connect(u, autocommit=True) for u in (url, *worker_urls)]
        try:
            while not stop.is_set():  # not polling: samples the peaks while the runs go
                row = await (await conns[0].execute(_CLIENTS)).fetchone()
                peaks[0] = max(peaks[0], int(row[0]) if row else 0)
                for i, conn in enumerate(conns[1:]):
                    row = await (await conn.execute(_FROM_THE_COORDINATOR)).fetchone()
                    peaks[i + 1] = max(peaks[i + 1], int(row[0]) if row else 0)
                    backends[i] = max(backends[i], int(row[1]) if row else 0)
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
    workers = ", ".join(
        f"worker {i + 1} {p} ({b} backends)" for i, (p, b) in enumerate(zip(peaks[1:], backends, strict=True))
    )
    print(
        f"  {n:>4} runs in flight: answered {answered}{others}, peak connections: coordinator {peaks[0]}"
        f" (client backends on this database: the replica's pool, lock sessions, cancel listener),"
        f" {workers} (connections from the coordinator, and the coordinator backends they serve) | wall {wall:.1f} s",
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
    workers_of_it = worker_urls(args.coordinator, url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:  # Citus creates it on the workers too
            conn.execute("create extension if not exists pg_stat_statements")
        secret = secrets.token_urlsafe(48)
        settings = Settings(service_secret=SecretStr(secret), database_url=url)
        tokens = [
            mint_token(settings, tenant=TenantId("acme"), user=UserId(f"user-{i}"), locale="en-US", ttl=3000)
            for i in range(50)
        ]
        async with open_pool(settings, max_size=2) as pool:
            await ingest_paths(pool, TenantId("acme"), [KB])
        cluster = Cluster(url, workers_of_it)
        print(f"Citus database {name}: coordinator {args.coordinator}, {len(workers)} workers", flush=True)
        # A small context window and long messages leave a thread's earlier turns out of it
        # from the fifth turn on, so recall indexes and searches them (thread_turns,
        # thread_terms) as in a long conversation.
        async with server(url, secret, CHATBOT_CONTEXT_TOKENS=str(args.context_tokens)) as base:
            await shards_per_run(cluster, base, tokens[0], args.runs, args.turns, args.show)
        if args.in_flight:
            async with server(url, secret, CHATBOT_OFFLINE_TOKEN_DELAY_MS=str(args.delay_ms)) as base:
                print(f"runs started together, offline model {args.delay_ms} ms between tokens, one replica:")
                for n in args.in_flight:
                    await in_flight(url, workers_of_it, base, tokens, n)
    finally:
        drop_database(args.coordinator, url)


def parse_args() -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--coordinator", default="postgresql://postgres@127.0.0.1:9700/postgres")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--turns", type=int, default=6, help="turns to a thread")
    parser.add_argument("--context-tokens", type=int, default=1500, help="the replica's CHATBOT_CONTEXT_TOKENS")
    parser.add_argument("--in-flight", type=int, nargs="*", default=[])
    parser.add_argument("--delay-ms", type=int, default=60)
    parser.add_argument("--show", action="store_true", help="list each run's shards")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
