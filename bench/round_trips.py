"""Count a run's sequential exchanges with Postgres, and measure what a network makes of them.

Two parts, both through `tests/fixtures/pg_proxy.py`'s proxy in front of an embedded
Postgres (127.0.0.1 only):

  count    An app in this process (uvicorn on 127.0.0.1, offline model) on the proxy.
           For a new thread, a 10-turn thread and a thread long enough for recall and a
           summary fold, one run's sequential exchanges are listed by name: those before
           the first token, the whole run (request to `end`), and the memory writer's
           (after `end`, until the run's memory job is done). The new and 10-turn threads
           run on the service's default settings; the recall scenario on an app of its own
           with a small window (`context_tokens=1500`), so that its 14 earlier turns leave
           the window, recall searches them and the summary folds. Each app is warmed up
           first (several runs: every connection opened, every statement prepared on the
           connections it meets); a statement prepared on its own flush still shows, as
           `(prepare) ...`, and so does a pipeline's lone `Sync`, as `(sync)`.
  latency  `chatbot serve` processes and the in-process floor (the peers' workload graph
           compiled here with `AsyncPostgresSaver` and `AsyncPostgresStore`), each on
           proxies adding 0, 1 and 5 ms of round trip (one proxy process, one port per
           delay). Latency and TTFT p50 per cell, every cell's targets interleaved, order
           rotating.

Usage: python -m bench.round_trips [--part count|latency|both] [--runs 80] [--rtts 0,1,5]
       [--anchors DIR]   (the peers' harness folder, for its `graph/bench_graph.py`;
                          without it the floor is left out)
       [--baseline DIR]  (another tree's `src`, e.g. `git archive main src` unpacked: served
                          beside this one, its latency / TTFT printed in the chatbot column)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvicorn
from tests.fixtures.pg_proxy import DelayProxy, Exchange, proxied, proxy_for

from bench._pg import bench_database, bench_settings, ingest_into
from chatbot.app import create_app
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.ids import TenantId, UserId

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
TENANT = TenantId("acme")
QUESTION = "How do I file a car body claim and which documents do I need?"
FACT = "Please remember I live in Shiraz. How do I file a car body claim?"
COUNTING_RTT_SECONDS = 0.05


@dataclass
class Timeline:
    """When one run was sent, showed its first token, ended, and its memory work was done."""

    sent: float
    first_token: float = 0.0
    ended: float = 0.0
    memory_done: float = 0.0


async def stream_turn(client: httpx.AsyncClient, thread: str, text: str, token: str) -> Timeline:
    """Send one message as a stream; note when its first token and its `end` arrive."""
    timeline = Timeline(time.monotonic())
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    body = {"message": {"content": text}}
    async with client.stream("POST", f"/v1/threads/{thread}/runs", json=body, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"run refused: {response.status_code} {(await response.aread())[:200]!r}")
        tail = b""
        async for chunk in response.aiter_raw():
            seen = tail + chunk
            if not timeline.first_token and b"event: token" in seen:
                timeline.first_token = time.monotonic()
            if b"event: end" in seen:
                timeline.ended = time.monotonic()
            if b"event: error" in seen:
                raise RuntimeError("the run failed")
            tail = seen[-16:]
    if not timeline.ended:
        raise RuntimeError("no end event")
    return timeline


async def memory_job_done(direct_url: str, thread: str) -> float:
    """Wait (on a connection of its own, not through the proxy) until the thread's memory jobs are gone."""
    async with await psycopg.AsyncConnection.connect(direct_url, autocommit=True) as conn:
        for _ in range(500):
            row = await (
                await conn.execute("select count(*) from memory_jobs where thread_id = %s", (thread,))
            ).fetchone()
            if row is not None and row[0] == 0:
                return time.monotonic()
            await asyncio.sleep(0.01)  # not polling a state the app announces: a bench's wait for the writer
    raise RuntimeError("the memory job did not finish")


@asynccontextmanager
async def app_server(settings: Settings) -> AsyncIterator[str]:
    """Serve the app in this process on 127.0.0.1 (uvicorn); yield its base URL."""
    app = create_app(settings)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the app stopped")
        await asyncio.sleep(0.02)  # not polling a state the server announces otherwise
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@dataclass
class Counted:
    """One scenario's exchanges: before the first token, the whole run, the memory writer."""

    name: str
    sent: float
    first_token: list[Exchange] = field(default_factory=list)
    run: list[Exchange] = field(default_factory=list)
    memory: list[Exchange] = field(default_factory=list)


async def count_scenario(
    name: str, base: str, proxy: DelayProxy, direct_url: str, token: str, earlier_turns: int
) -> Counted:
    """Run `earlier_turns` turns on a new thread, then count the exchanges of one more."""
    assert proxy.exchanges is not None
    thread = f"rtt-{uuid.uuid4().hex[:12]}"
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for _ in range(earlier_turns):
            await stream_turn(client, thread, QUESTION, token)
        await memory_job_done(direct_url, thread)
        # The measured run alone goes through a long delay: far longer than the CPU work between
        # two statements the service overlaps (a query's embedding, say), so those are seen
        # overlapped, and each exchange the run waits for stands out.
        proxy.one_way = COUNTING_RTT_SECONDS / 2
        timeline = await stream_turn(client, thread, FACT, token)
        timeline.memory_done = await memory_job_done(direct_url, thread)
        proxy.one_way = 0
    seen = proxy.exchanges
    return Counted(
        name,
        timeline.sent,
        first_token=seen.between(timeline.sent, timeline.first_token),
        run=seen.between(timeline.sent, timeline.ended),
        memory=seen.between(timeline.ended, timeline.memory_done),
    )


# By app: the settings it runs on (beside the bench's), how they are named in the output,
# and its scenarios (name, earlier turns).
APPS: tuple[tuple[dict[str, int], str, tuple[tuple[str, int], ...]], ...] = (
    ({}, "default settings", (("new thread", 0), ("10-turn thread", 10))),
    # A small window: 14 earlier turns then leave it, so the run recalls and folds.
    ({"context_tokens": 1500}, "context_tokens=1500", (("recall and a summary fold", 14),)),
)
WARM_UP_THREADS = 6


async def count_part(url: str, secret: str) -> list[Counted]:
    """Count the exchanges of one run of each scenario; print them by name."""
    results: list[tuple[str, Counted]] = []
    async with proxied(url) as proxy:
        for fields, named, scenarios in APPS:
            settings = bench_settings(proxy.url(url), service_secret=_secret(secret), **fields)
            token = mint_token(
                settings, tenant=TENANT, user=UserId(f"rtt-{uuid.uuid4().hex[:6]}"), locale="en-US", ttl=3600
            )
            async with app_server(settings) as base:
                # Runs on threads of their own first: the pool's connections opened, and both
                # lock sessions and the connections a run meets with every statement prepared.
                for _ in range(WARM_UP_THREADS):
                    await count_scenario("warm-up", base, proxy, url, token, 1)
                for name, earlier in scenarios:
                    results.append((named, await count_scenario(name, base, proxy, url, token, earlier)))
    for named, counted in results:
        print(
            f"\n{counted.name} ({named}): {len(counted.first_token)} before the first token, "
            f"{len(counted.run)} in the whole run, {len(counted.memory)} in the memory writer"
        )
        for label, exchanges in (("run", counted.run), ("memory writer", counted.memory)):
            print(f"  {label}:")
            for i, exchange in enumerate(exchanges, 1):
                mark = "*" if exchange in counted.first_token else " "
                where = "lock session" if any(s.startswith("chatbot-locks") for s in exchange.sessions) else "pool"
                at = (exchange.started - counted.sent) * 1000
                print(f"   {mark}{i:2d}. +{at:6.1f} ms  {exchange.name[:300]}  [{where}]")
    print("\n(* before the first token)")
    return [counted for _, counted in results]


def _secret(secret: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(secret)


# --- latency and TTFT beside the floor ------------------------------------------------


async def proxy_process(url: str, rtts: list[float]) -> None:
    """Serve one proxy per added round trip, without counting, until terminated; print the ports."""
    proxies = [proxy_for(url, rtt_ms=rtt, count=False) for rtt in rtts]
    for proxy in proxies:
        await proxy.start()
    print(" ".join(str(p.port) for p in proxies), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for proxy in proxies:
        await proxy.stop()


@asynccontextmanager
async def proxies(url: str, rtts: list[float]) -> AsyncIterator[list[str]]:
    """Run the delay proxies in a process of their own; yield one database URL per delay."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.round_trips", "--part", "proxy", "--url", url,
        "--rtts", ",".join(str(r) for r in rtts), stdout=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        ports = (await process.stdout.readline()).decode().split()
        urls = []
        for port in ports:
            params = psycopg.conninfo.conninfo_to_dict(url)
            params.update(host="127.0.0.1", port=port, sslmode="disable", gssencmode="disable")
            urls.append(psycopg.conninfo.make_conninfo(**params))  # type: ignore[arg-type]
        yield urls
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGTERM)
        await process.wait()


@asynccontextmanager
async def serve_process(url: str, secret: str, source: Path | None = None) -> AsyncIterator[str]:
    """Run `chatbot serve` (offline model, one process) on 127.0.0.1; yield its base URL.

    `source`: a `src` folder of another tree (an older release) to serve instead of this one.
    """
    from bench.runs import server

    if source is None:
        async with server(url, secret) as base:
            yield base
        return
    async with server(url, secret, PYTHONPATH=str(source)) as base:
        yield base


class Floor:
    """The peers' workload graph with `AsyncPostgresSaver` and `AsyncPostgresStore`, in this process."""

    def __init__(self, anchors: Path, url: str) -> None:
        self.anchors = anchors
        self.url = url

    async def __aenter__(self) -> Floor:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.store.postgres.aio import AsyncPostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        sys.path.insert(0, str(self.anchors / "graph"))
        import bench_graph

        self.pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.url,
            min_size=2,
            max_size=16,
            open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        await self.pool.open(wait=True)
        saver = AsyncPostgresSaver(self.pool)
        store = AsyncPostgresStore(self.pool)
        await saver.setup()
        await store.setup()
        self.graph = bench_graph.build_graph().compile(checkpointer=saver, store=store)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.close()

    async def turn(self, thread: str) -> tuple[float, float]:
        """Run one turn; return (latency, TTFT) in seconds."""
        from langchain_core.messages import AIMessageChunk, HumanMessage

        started = time.perf_counter()
        ttft = 0.0
        config = {"configurable": {"thread_id": thread}}
        async for mode, chunk in self.graph.astream(
            {"messages": [HumanMessage(content=QUESTION)]}, config, stream_mode=["messages", "custom"]
        ):
            if (
                mode == "messages"
                and isinstance(chunk[0], AIMessageChunk)
                and not ttft
                and "tok00" in str(chunk[0].content)
            ):
                ttft = time.perf_counter() - started
        return time.perf_counter() - started, ttft


class Service:
    """`chatbot serve` over HTTP, read as the backend reads it."""

    def __init__(self, base: str, token: str) -> None:
        self.client = httpx.AsyncClient(base_url=base, timeout=60)
        self.token = token

    async def turn(self, thread: str) -> tuple[float, float]:
        """Run one turn; return (latency, TTFT) in seconds."""
        timeline = await stream_turn(self.client, thread, QUESTION, self.token)
        return timeline.ended - timeline.sent, timeline.first_token - timeline.sent


@dataclass
class Cell:
    """Latencies and TTFTs of one target at one added round trip and one thread kind."""

    latency: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)


THREAD_KINDS = (("new", 0), ("1-5 earlier turns", 1), ("10-13 earlier turns", 10))


async def latency_part(
    url: str, secret: str, runs: int, rtts: list[float], anchors: Path | None, baseline: Path | None
) -> None:
    """Measure latency and TTFT of each target on each proxy, interleaved; print a table."""
    settings = bench_settings(url, service_secret=_secret(secret))
    token = mint_token(settings, tenant=TENANT, user=UserId(f"rtt-{uuid.uuid4().hex[:6]}"), locale="en-US", ttl=3600)
    cells: dict[tuple[float, str, str], Cell] = {}
    async with proxies(url, rtts) as urls, contextlib.AsyncExitStack() as stack:
        targets: dict[float, dict[str, Any]] = {}
        for rtt, proxied_url in zip(rtts, urls, strict=True):
            base = await stack.enter_async_context(serve_process(proxied_url, secret))
            targets[rtt] = {"chatbot": Service(base, token)}
            if baseline is not None:
                old = await stack.enter_async_context(serve_process(proxied_url, secret, baseline))
                targets[rtt]["baseline"] = Service(old, token)
            if anchors is not None:
                targets[rtt]["floor"] = await stack.enter_async_context(Floor(anchors, proxied_url))
        threads: dict[tuple[float, str, str], tuple[str, int]] = {}
        order = itertools.count()
        for i in range(runs + 3):  # three warm-up rounds, discarded
            for rtt, kind_and_targets in targets.items():
                for kind, earlier in THREAD_KINDS:
                    names = list(kind_and_targets)
                    turn = next(order) % len(names)
                    names = names[turn:] + names[:turn]
                    for name in names:
                        target = kind_and_targets[name]
                        key = (rtt, kind, name)
                        thread, done = threads.get(key, (f"rtt-{uuid.uuid4().hex}", 0))
                        if kind == "new":
                            thread, done = f"rtt-{uuid.uuid4().hex}", 0
                        while done < earlier:
                            await target.turn(thread)
                            done += 1
                        latency, ttft = await target.turn(thread)
                        done += 1
                        if earlier and done > earlier + 4:
                            thread, done = f"rtt-{uuid.uuid4().hex}", 0  # keep the thread in its band
                        threads[key] = (thread, done)
                        if i >= 3:
                            cell = cells.setdefault(key, Cell())
                            cell.latency.append(latency * 1000)
                            cell.ttft.append(ttft * 1000)
        for rtt_targets in targets.values():
            for target in rtt_targets.values():
                if isinstance(target, Service):
                    await target.client.aclose()
    print(f"\n{runs} runs per cell, interleaved (offline model; TTFT and latency p50, ms)")
    with_baseline = baseline is not None
    print(
        "| added RTT | thread | chatbot: latency / TTFT |"
        + (" baseline: latency / TTFT |" if with_baseline else "")
        + " floor: latency / TTFT | ratio (latency / TTFT) |"
    )
    print("|---|---|---|" + ("---|" if with_baseline else "") + "---|---|")
    for rtt in rtts:
        for kind, _ in THREAD_KINDS:
            ours = cells[(rtt, kind, "chatbot")]
            line = f"| {rtt:g} ms | {kind} | {_p50(ours.latency):.1f} / {_p50(ours.ttft):.1f} |"
            before = cells.get((rtt, kind, "baseline"))
            if before is not None:
                line += f" {_p50(before.latency):.1f} / {_p50(before.ttft):.1f} |"
            floor = cells.get((rtt, kind, "floor"))
            if floor is None:
                print(line + " - | - |")
                continue
            ratio_l = _p50(ours.latency) / _p50(floor.latency)
            ratio_t = _p50(ours.ttft) / _p50(floor.ttft)
            print(f"{line} {_p50(floor.latency):.1f} / {_p50(floor.ttft):.1f} | {ratio_l:.2f}x / {ratio_t:.2f}x |")


def _p50(values: list[float]) -> float:
    return statistics.median(values)


async def main(args: argparse.Namespace) -> None:
    """Set up the database and the knowledge base, then count and measure."""
    secret = secrets.token_urlsafe(48)
    async with bench_database("round_trips") as url:
        settings = bench_settings(url)
        await ingest_into(url, settings, TENANT, [KB])
        if args.part in ("count", "both"):
            await count_part(url, secret)
        if args.part in ("latency", "both"):
            rtts = [float(r) for r in args.rtts.split(",")]
            await latency_part(url, secret, args.runs, rtts, args.anchors, args.baseline)


def parse_args() -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("count", "latency", "both", "proxy"), default="both")
    parser.add_argument("--runs", type=int, default=80)
    parser.add_argument("--rtts", default="0,1,5")
    parser.add_argument("--anchors", type=Path, default=None)
    parser.add_argument("--baseline", type=Path, default=None, help="another tree's src folder, served beside")
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.part == "proxy":
        asyncio.run(proxy_process(arguments.url, [float(r) for r in arguments.rtts.split(",")]))
    else:
        asyncio.run(main(arguments))
