"""Runs in flight: bursts of slow streams on one replica, then two, on a fixed connection budget.

The offline model streams its answer (about 60 tokens) with a delay between tokens, as a
real model would over several seconds. For each level, N runs start together on distinct
threads; the script prints, per level:
- answered / refused / failed;
- time to first token p50 / p99 (the offline model's own first token is immediate, so
  this is all overhead: admission, lock, message write, memory, retrieval);
- peak Postgres connections of the whole database (every replica together);
- peak thread locks held at once (runs in flight);
- CPU seconds per run of the replica processes (/proc, user + system);
- resident memory per stream: the replicas' peak RSS growth over the level / N.

    python -m bench.inflight                         # 100, 300, 500, 1000 on 1 then 2 replicas
    python -m bench.inflight --levels 500 --replicas 1 --delay-ms 60
    python -m bench.inflight --levels 500 --replicas 1 --workers 2 --pool-size 8   # 2 processes, same budget

The client is a few lines of raw HTTP/1.1 on asyncio streams (not httpx), so that the load
generator, which shares the machine's cores with the replicas, costs as little as it can.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from pydantic import SecretStr

from bench._pg import bench_database
from bench.runs import SERVER_PIDS, server
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.pool import make_pool
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
QUESTION = "What does travel insurance cover for medical costs abroad?"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Outcome:
    """What one run's client saw."""

    status: int
    kind: str  # "answered" | "refused" | "failed"
    ttft: float | None


@dataclass
class Peaks:
    """Maxima sampled while a level runs."""

    connections: int = 0
    locks: int = 0
    rss_kb: dict[int, int] = field(default_factory=dict)


async def one_run(base: str, token: str, thread: str) -> Outcome:
    """POST a run over a fresh connection and read its SSE stream to the end."""
    parts = urlsplit(base)
    body = json.dumps({"message": {"content": QUESTION}}).encode()
    head = (
        f"POST /v1/threads/{thread}/runs HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    except OSError:
        return Outcome(0, "failed", None)
    try:
        writer.write(head + body)
        status = int((await reader.readline()).split()[1])
        if status != 200:
            return Outcome(status, "refused" if status in (409, 429, 503) else "failed", None)
        seen, first = b"", None
        while chunk := await reader.read(65536):
            seen = seen[-32:] + chunk
            if first is None and b"event: token" in seen:
                first = time.perf_counter() - started
            if b"event: end" in seen:
                return Outcome(status, "answered", first)
            if b"event: error" in seen:
                return Outcome(status, "failed", first)
        return Outcome(status, "failed", first)
    finally:
        writer.close()


def replica_processes(pid: int) -> list[int]:
    """Return a replica's processes: `chatbot serve` and, with `--workers`, its worker children."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return [pid, *children]


def cpu_seconds(processes: list[int]) -> float:
    """Return the user + system CPU time of a replica's processes."""
    total = 0
    for process in processes:
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def rss_kb(processes: list[int]) -> int:
    """Return the resident set size of a replica's processes in KiB."""
    total = 0
    for process in processes:
        try:
            lines = Path(f"/proc/{process}/status").read_text().splitlines()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in lines if line.startswith("VmRSS:")), 0)
    return total


async def watch(url: str, replicas: dict[int, list[int]], peaks: Peaks, stop: asyncio.Event) -> None:
    """Sample connections, held thread locks and RSS until `stop`."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            row = await (
                await conn.execute(
                    "select (select count(*) from pg_stat_activity where datname = current_database() "
                    "and pid <> pg_backend_pid()), (select count(*) from pg_locks where locktype = 'advisory' "
                    # exclusive: thread locks; the erasure key's shared holds are not runs
                    "and granted and mode = 'ExclusiveLock' "
                    "and database = (select oid from pg_database where datname = current_database()))"
                )
            ).fetchone()
            assert row is not None
            peaks.connections, peaks.locks = max(peaks.connections, row[0]), max(peaks.locks, row[1])
            for pid, processes in replicas.items():
                peaks.rss_kb[pid] = max(peaks.rss_kb.get(pid, 0), rss_kb(processes))
            await asyncio.sleep(0.05)


async def level(url: str, bases: list[str], tokens: list[str], n: int, tag: str) -> None:
    """Start `n` runs together across `bases`; print the level's figures."""
    # Listed once: the workers live as long as their replica, and scanning /proc while the
    # runs go would take CPU from the replicas on the same cores.
    replicas = {pid: replica_processes(pid) for pid in (SERVER_PIDS[b] for b in bases)}
    cpu_before = sum(cpu_seconds(processes) for processes in replicas.values())
    rss_before = {pid: rss_kb(processes) for pid, processes in replicas.items()}
    peaks, stop = Peaks(), asyncio.Event()
    watcher = asyncio.create_task(watch(url, replicas, peaks, stop))
    started = time.perf_counter()
    outcomes = await asyncio.gather(
        *(one_run(bases[i % len(bases)], tokens[i % len(tokens)], f"{tag}-{n}-{i}") for i in range(n))
    )
    wall = time.perf_counter() - started
    stop.set()
    await watcher
    cpu = sum(cpu_seconds(processes) for processes in replicas.values()) - cpu_before
    growth_kb = sum(peaks.rss_kb[pid] - rss_before[pid] for pid in replicas)
    kinds = {k: sum(1 for o in outcomes if o.kind == k) for k in ("answered", "refused", "failed")}
    ttfts = sorted(o.ttft for o in outcomes if o.ttft is not None)
    p50 = statistics.median(ttfts) if ttfts else float("nan")
    p99 = ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))] if ttfts else float("nan")
    print(
        f"  {n:>5} runs: answered {kinds['answered']:>4} refused {kinds['refused']:>4} failed {kinds['failed']:>3}"
        f" | ttft p50 {p50 * 1000:6.0f} ms p99 {p99 * 1000:6.0f} ms | peak conns {peaks.connections:>3}"
        f" | peak locks {peaks.locks:>4} | cpu/run {cpu / n * 1000:5.1f} ms"
        f" | rss/stream {growth_kb / max(1, peaks.locks):5.1f} KiB | wall {wall:5.1f} s",
        flush=True,
    )


async def main(args: argparse.Namespace) -> None:
    """Set up a database and the replicas; run every level."""
    secret = secrets.token_urlsafe(48)
    settings = Settings(service_secret=SecretStr(secret), database_url="postgresql:///unused")
    tokens = [
        mint_token(settings, tenant=TenantId("acme"), user=UserId(f"user-{i}"), locale="en-US", ttl=3000)
        for i in range(50)
    ]
    env = {
        "CHATBOT_OFFLINE_TOKEN_DELAY_MS": str(args.delay_ms),
        "CHATBOT_POOL_MAX_SIZE": str(args.pool_size),
        "CHATBOT_SSE_FLUSH_MS": str(args.flush_ms),
    }
    async with bench_database("inflight") as url:
        pool = make_pool(url, settings, name="bench", min_size=1, max_size=2)
        await pool.open(wait=True)
        try:
            await ingest_paths(pool, TenantId("acme"), [KB])
        finally:
            await pool.close()
        print(
            f"offline model, {args.delay_ms} ms between tokens; tokens flushed every {args.flush_ms} ms; "
            f"{args.workers} worker process(es) per replica, pool {args.pool_size} per worker "
            f"(budget {args.workers * (args.pool_size + 4)} connections per replica)",
            flush=True,
        )
        for count in args.replicas:
            async with AsyncExitStack() as stack:
                bases = [
                    await stack.enter_async_context(server(url, secret, workers=args.workers, **env))
                    for _ in range(count)
                ]
                print(f"{count} replica(s):", flush=True)
                for n in args.levels:
                    await level(url, bases, tokens, n, f"r{count}")


def parse_args() -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[100, 300, 500, 1000])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--delay-ms", type=int, default=60)
    parser.add_argument("--pool-size", type=int, default=16, help="CHATBOT_POOL_MAX_SIZE (per worker process)")
    parser.add_argument("--workers", type=int, default=1, help="chatbot serve --workers (processes per replica)")
    parser.add_argument("--flush-ms", type=int, default=50, help="CHATBOT_SSE_FLUSH_MS of the replicas")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
