"""Measure what tracing costs a run: CPU per run and runs/s with tracing off and on, side by side.

Three apps run in this process on one database (offline model, demo knowledge base):
`off`, tracing off; `on`, tracing into an OpenTelemetry SDK provider whose batch processor
feeds an exporter that drops the spans (everything a replica pays for tracing except the
exporter's encoding and network send, which an OTLP exporter does on the processor's
background thread, in batches); and `callback`, a do-nothing LangChain callback handler in
the run's config instead of the span handler, which tells LangChain's callback machinery
apart from the spans themselves. Runs go in-process (httpx's ASGI transport), SSE read to
`end`, in alternating slices so that drift of this shared machine hits both sides alike.
CPU is this process's (`time.process_time`, the batch thread included), not Postgres's.

On a shared machine those differences sink in the noise, so the same three sides are then
timed on the graph alone (offline model, no retrieval, `InMemorySaver`, no HTTP, one run
at a time), where tracing's own cost is a large share of a run's.

Usage: python -m bench.tracing [--runs 300] [--concurrency 1 8] [--slices 6] [--graph-runs 3000]
Uses CHATBOT_DATABASE_URL (migrated here) or starts an embedded Postgres under a temp dir.
Needs the OpenTelemetry SDK (the dev extra has it).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench._pg import bench_database, bench_settings, ingest_into, started_app
from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.tracing.service import NO_TRACING, RunTrace, Tracing, tracing_for

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
TENANT = TenantId("acme")
QUESTIONS = (
    ("What does travel insurance cover for medical costs abroad?", "en-US"),
    ("How do I file a car body claim and which documents do I need?", "en-US"),
    ("بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟", "fa-IR"),
)


class DroppingExporter(SpanExporter):
    """Accept every batch and keep nothing: counts what was exported."""

    def __init__(self) -> None:
        """Start with no span exported."""
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Count the batch and drop it."""
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


class DoNothing(BaseCallbackHandler):
    """A callback handler that ignores what the span handler ignores, and does nothing with the rest."""

    run_inline = True  # as the span handler: a sync handler not inline is called in an executor thread
    ignore_retriever = ignore_agent = ignore_retry = ignore_custom_event = True


class CallbackOnly(RunTrace):
    """A run trace that only puts a do-nothing callback handler in the run's config."""

    handler = DoNothing()

    def configure(self, config: RunnableConfig) -> RunnableConfig:
        """Return the config with the do-nothing handler."""
        return {**config, "callbacks": [self.handler]}


class CallbackOnlyTracing(Tracing):
    """Give every run the do-nothing callback handler and no span."""

    def start_run(
        self, *, thread_id: str, run_id: str, tenant_id: str, parent: Mapping[str, str] | None = None
    ) -> RunTrace:
        """Return the callback-only trace."""
        return CallbackOnly()


@dataclass
class Tally:
    """Latencies, wall time and CPU time of one side at one concurrency."""

    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0

    def line(self, name: str) -> str:
        """Return the side's figures as one line."""
        ms = sorted(x * 1000 for x in self.latencies)
        return (
            f"  {name:<12} {len(ms) / self.wall:7.1f} runs/s   CPU {self.cpu / len(ms) * 1000:6.2f} ms/run"
            f"   p50 {statistics.median(ms):6.1f} ms   ({len(ms)} runs)"
        )


@asynccontextmanager
async def app_client(
    settings: Settings, provider: TracerProvider | None, tracing: Tracing | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """Run an app's lifespan and yield an in-process client of it (`tracing` replaces its tracer)."""
    async with started_app(settings, tracer_provider=provider) as app:
        if tracing is not None:
            app.state.services.runs.tracing = tracing
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as client:
            yield client


async def run_slice(
    client: httpx.AsyncClient, settings: Settings, label: str, runs: int, concurrency: int, tally: Tally
) -> None:
    """Send `runs` runs at `concurrency`, each on a new thread, adding their figures to `tally`."""
    tokens = {
        locale: mint_token(settings, tenant=TENANT, user=UserId(f"bench-{label}"), locale=locale, ttl=3600)
        for locale in ("en-US", "fa-IR")
    }
    counter = iter(range(runs))
    slice_id = secrets.token_hex(3)

    async def worker() -> None:
        for i in counter:
            question, locale = QUESTIONS[i % len(QUESTIONS)]
            started = time.perf_counter()
            response = await client.post(
                f"/v1/threads/{label}-{slice_id}-{i}/runs",
                json={"message": {"content": question}},
                headers={"Authorization": f"Bearer {tokens[locale]}"},
            )
            if response.status_code != 200 or "event: end" not in response.text:
                raise RuntimeError(f"run failed: {response.status_code}")
            tally.latencies.append(time.perf_counter() - started)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    tally.wall += time.perf_counter() - wall
    tally.cpu += time.process_time() - cpu


async def graph_only(runs: int, slices: int, provider: TracerProvider) -> None:
    """Time the graph alone, run after run, with each side's tracer; print CPU per run."""
    graph = build_graph(AgentDeps()).compile(checkpointer=InMemorySaver())
    sides: dict[str, Tracing] = {
        "off": NO_TRACING,
        "on": tracing_for("off", tracer_provider=provider),
        "callback": CallbackOnlyTracing(),
    }
    cpu = dict.fromkeys(sides, 0.0)
    done = dict.fromkeys(sides, 0)

    async def one(tracing: Tracing, n: int) -> None:
        run_id = f"graph-{n}"
        trace = tracing.start_run(thread_id=ThreadId(run_id), run_id=RunId(run_id), tenant_id=TenantId(TENANT))
        config = trace.configure({"configurable": {"thread_id": run_id}})
        context = Context(
            tenant_id=TenantId(TENANT),
            user_id=UserId("bench"),
            locale="en-US",
            run_id=RunId(run_id),
            thread_id=ThreadId(run_id),
        )
        question = {"messages": [{"role": "user", "content": QUESTIONS[n % len(QUESTIONS)][0]}]}
        # langgraph types the input as the state (messages: list[AnyMessage]), though the messages
        # reducer (add_messages) takes message dicts like this one and converts them.
        await graph.ainvoke(question, config, context=context, durability="exit")  # type: ignore[call-overload]
        trace.end(status="answered", ttft_ms=None, error=None)

    for tracing in sides.values():  # warm-up
        for n in range(50):
            await one(tracing, -n - 1)
    per_slice = max(1, runs // slices)
    counter = 0
    for index in range(slices):
        names = list(sides)[index % 3 :] + list(sides)[: index % 3]
        for name in names:
            started = time.process_time()
            for _ in range(per_slice):
                counter += 1
                await one(sides[name], counter)
            cpu[name] += time.process_time() - started
            done[name] += per_slice
    print("graph only (InMemorySaver, offline model, one run at a time):")
    base = cpu["off"] / done["off"]
    for name in sides:
        each = cpu[name] / done[name]
        print(f"  {name:<12} CPU {each * 1000:6.3f} ms/run   x{each / base:.2f} ({(each - base) * 1000:+.3f} ms)")


async def main(args: argparse.Namespace) -> None:
    """Measure both sides at each concurrency and print them with their ratio."""
    async with bench_database("tracing") as url:
        settings = bench_settings(url, model="offline", pool_max_size=16)
        await ingest_into(url, settings, TENANT, [KB])
        exporter = DroppingExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        async with AsyncExitStack() as stack:
            clients = {
                "off": await stack.enter_async_context(app_client(settings, None)),
                "on": await stack.enter_async_context(app_client(settings, provider)),
                "callback": await stack.enter_async_context(app_client(settings, None, CallbackOnlyTracing())),
            }
            for name, client in clients.items():  # warm-up: imports, prepared statements, pools
                await run_slice(client, settings, f"warm-{name}", 20, 4, Tally())
            for concurrency in args.concurrency:
                tallies = {name: Tally() for name in clients}
                per_slice = max(1, args.runs // args.slices)
                for index in range(args.slices):
                    order = list(clients)[index % 3 :] + list(clients)[: index % 3]  # rotate who goes first
                    for name in order:
                        await run_slice(clients[name], settings, name, per_slice, concurrency, tallies[name])
                print(f"concurrency {concurrency}:")
                for name, tally in tallies.items():
                    print(tally.line(name))
                off = tallies["off"]
                for name in ("on", "callback"):
                    side = tallies[name]
                    cpu_off, cpu_side = off.cpu / len(off.latencies), side.cpu / len(side.latencies)
                    rate_ratio = (len(side.latencies) / side.wall) / (len(off.latencies) / off.wall)
                    print(
                        f"  {name} / off: CPU per run x{cpu_side / cpu_off:.2f}"
                        f" ({(cpu_side - cpu_off) * 1000:+.2f} ms), runs/s x{rate_ratio:.2f}"
                    )
        await graph_only(args.graph_runs, args.slices, provider)
        provider.shutdown()
        print(f"spans exported (dropped) while tracing on: {exporter.exported}")


def parse_args() -> argparse.Namespace:
    """Return the command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=300, help="runs per side and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--slices", type=int, default=6, help="slices per side, the order rotating")
    parser.add_argument("--graph-runs", type=int, default=3000, help="runs per side of the graph-only timing")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
