"""Replica CPU per run and per piece of a streamed answer: offline beside each real provider path.

A real `chatbot serve` replica (one worker, 127.0.0.1) per target, its provider the wire
double (tests/fixtures/provider_double.py) in this process, streaming the structured answer
in `--piece-chars` pieces with no delay. For every answer size (300, 1,500, 6,000, 12,000
characters) and language (English, Persian), runs go one after another on fresh threads,
targets interleaved; the replica's CPU is its utime + stime from /proc (the double's and
Postgres's are not in it), counted until the replica is idle again, minus its idle rate.

Targets: `offline` (its own fixed answers: the floor of a run), `json_schema` (OpenAI
gpt-4o-mini, response_format), `tools` (OpenAI gpt-4-turbo, a forced tool call) and
`anthropic` (claude-haiku-4-5, a forced tool with input_json_delta). With `--baseline REV`
each real target also runs as `old <target>`: the same tree with the streaming files
(src/chatbot/models/, agent/modelcall.py) as they were at REV, measured in the same run.

Also printed: what the provider SDKs cost per piece alone (openai.AsyncOpenAI /
anthropic.AsyncAnthropic streaming the same answer, LangChain's `astream` alone, and our
own reader, models/_wire.py), as `time.thread_time` of this process's main thread (the
double runs in its own thread).

Goals (printed, not asserted): CPU per run at 12,000 characters <= 9x the figure at 1,500;
(real - offline CPU per run) / pieces <= 0.25 ms at 1,500 Persian characters, 4-character
pieces, on json_schema, tools and anthropic.

    .venv/bin/python -m bench.streaming [--sizes 300,1500,6000,12000] [--langs en,fa]
        [--targets offline,json_schema,tools,anthropic] [--scale 1.0] [--baseline REV]

Uses CHATBOT_DATABASE_URL (migrated here) or an embedded Postgres in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import HumanMessage
from pydantic import SecretStr
from tests.fixtures.provider_double import Behaviour, ProviderDouble, english_answer, persian_answer

from bench._pg import bench_database
from bench.runs import KB, ROOT, SERVER_PIDS, server
from bench.worst_case_text import idle_rate, process_cpu, wait_idle
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.pool import make_pool
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths

TENANT = TenantId("acme")
MODELS = {
    "json_schema": ("openai:gpt-4o-mini", "openai"),
    "tools": ("openai:gpt-4-turbo", "openai"),
    "anthropic": ("anthropic:claude-haiku-4-5", "anthropic"),
}
QUESTIONS = {
    "en": ("What does travel insurance cover for medical costs abroad?", "en-US"),
    "fa": ("بیمه سفر هزینه‌های درمان در خارج از کشور را پوشش می‌دهد؟", "fa-IR"),
}
# The files a baseline takes from its revision: everything else is today's tree.
STREAMING_FILES = ("src/chatbot/models", "src/chatbot/agent/modelcall.py")
GOAL_RATIO = 9.0
GOAL_PER_PIECE_MS = 0.25


def answer_of(lang: str, chars: int) -> str:
    """Return the answer text the double streams."""
    return persian_answer(chars) if lang == "fa" else english_answer(chars)


def payload_pieces(answer: str, piece_chars: int) -> int:
    """Return how many pieces the double streams for `answer` (the whole structured object)."""
    payload = json.dumps({"status": "answered", "answer": answer, "citations": []}, ensure_ascii=False)
    return math.ceil(len(payload) / piece_chars)


def runs_for(chars: int, scale: float) -> int:
    """Return the sequential runs per measurement: enough CPU to read past /proc's 10 ms ticks."""
    return max(3, round(min(20, 24_000 / chars) * scale))


@dataclass
class Target:
    """One replica under measurement."""

    name: str
    base: str
    pid: int
    client: httpx.AsyncClient
    settings: Settings
    idle: float = 0.0
    serial: int = 0

    async def run(self, question: str, locale: str) -> None:
        """Run one message on a fresh thread; read its SSE stream to the end."""
        self.serial += 1
        user = f"bench-stream-{self.serial % 7}"
        thread = f"stream-{uuid.uuid4().hex[:12]}"
        token = mint_token(self.settings, tenant=TENANT, user=UserId(user), locale=locale, ttl=3600)
        body = {"message": {"content": question}}
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        async with self.client.stream("POST", f"/v1/threads/{thread}/runs", json=body, headers=headers) as response:
            data = b"".join([chunk async for chunk in response.aiter_bytes()])
        if response.status_code != 200 or b"event: end" not in data:
            raise RuntimeError(f"{self.name}: run failed: {response.status_code} {data[-300:]!r}")

    async def cpu_per_run(self, question: str, locale: str, runs: int) -> float:
        """Return the replica's CPU seconds per sequential run, its background work included."""
        await wait_idle(self.pid, self.idle)
        before, started = process_cpu(self.pid), time.monotonic()
        for _ in range(runs):
            await self.run(question, locale)
        await wait_idle(self.pid, self.idle)
        spent = process_cpu(self.pid) - before - self.idle * (time.monotonic() - started)
        return max(spent, 0.0) / runs


def baseline_tree(rev: str, into: Path) -> Path:
    """Return a copy of today's src/ with the streaming files as they were at `rev`."""
    src = into / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(src / "chatbot" / "models")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, *STREAMING_FILES], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return src


@asynccontextmanager
async def replica(
    name: str, url: str, secret: str, settings: Settings, double: ProviderDouble, pythonpath: Path | None
) -> AsyncIterator[Target]:
    """Start one `chatbot serve` for target `name` (an `old ` prefix: the baseline tree)."""
    path = name.removeprefix("old ")
    env: dict[str, str] = {"OPENAI_API_KEY": "bench-key", "ANTHROPIC_API_KEY": "bench-key"}
    if path in MODELS:
        spec, provider = MODELS[path]
        base_url = double.openai_base_url if provider == "openai" else double.anthropic_base_url
        env |= {"CHATBOT_MODEL": spec, "CHATBOT_MODEL_BASE_URL": base_url}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    async with server(url, secret, **env) as base:  # type: ignore[arg-type]  # CHATBOT_* variables
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
            yield Target(name, base, SERVER_PIDS[base], client, settings)


@dataclass
class Table:
    """CPU seconds per run, by (target, language, characters)."""

    cpu: dict[tuple[str, str, int], float] = field(default_factory=dict)

    def get(self, target: str, lang: str, chars: int) -> float | None:
        return self.cpu.get((target, lang, chars))


def fit(points: list[tuple[int, float]]) -> tuple[float, float, float] | None:
    """Return (a, b, c) of cpu = a + b*chars + c*chars^2 by least squares, or None with under 3 sizes."""
    if len({x for x, _ in points}) < 3:
        return None
    # The normal equations of the 3x3 system, solved by Cramer's rule (no numpy here).
    sums = [sum(x**k for x, _ in points) for k in range(5)]
    rhs = [sum(y * x**k for x, y in points) for k in range(3)]
    matrix = [[sums[i + j] for j in range(3)] for i in range(3)]

    def det(m: list[list[float]]) -> float:
        return (
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        )

    whole = det(matrix)
    coef = []
    for col in range(3):
        swapped = [[rhs[i] if j == col else matrix[i][j] for j in range(3)] for i in range(3)]
        coef.append(det(swapped) / whole)
    return coef[0], coef[1], coef[2]


# -- the SDKs alone --------------------------------------------------------------------------


async def sdk_floor(double: ProviderDouble, chars: int, piece_chars: int, repeat: int) -> dict[str, float]:
    """Return the client-side CPU ms per piece of each SDK streaming the answer alone (Persian)."""
    import anthropic
    import openai
    from langchain_anthropic import ChatAnthropic
    from langchain_openai import ChatOpenAI

    from chatbot.agent.modelcall import _ANSWER_SCHEMA as schema

    double.reset()
    answer = persian_answer(chars)
    double.default = Behaviour(answer=answer, piece_chars=piece_chars)
    pieces = payload_pieces(answer, piece_chars)
    messages = [{"role": "user", "content": QUESTIONS["fa"][0]}]
    response_format = {"type": "json_schema", "json_schema": {"name": schema["title"], "schema": schema}}
    tool = {"name": schema["title"], "input_schema": schema}
    oai = openai.AsyncOpenAI(base_url=double.openai_base_url, api_key="bench-key", max_retries=0)
    ant = anthropic.AsyncAnthropic(base_url=double.anthropic_base_url, api_key="bench-key", max_retries=0)
    key = SecretStr("bench-key")
    lc_openai = ChatOpenAI(
        model="gpt-4o-mini", base_url=double.openai_base_url, api_key=key, stream_usage=True, stream_chunk_timeout=0
    )
    lc_anthropic = ChatAnthropic(
        model="claude-haiku-4-5", base_url=double.anthropic_base_url, api_key=key, timeout=None, stop=None
    )
    openai_params: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": messages,
        "stream": True,
        "response_format": response_format,
        "stream_options": {"include_usage": True},
    }
    anthropic_params: dict[str, Any] = {
        "model": "claude-haiku-4-5",
        "max_tokens": 4096,
        "messages": messages,
        "stream": True,
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": schema["title"]},
    }

    async def openai_sdk() -> None:
        stream = await oai.chat.completions.create(**openai_params)
        async for _ in stream:
            pass

    async def anthropic_sdk() -> None:
        stream = await ant.messages.create(**anthropic_params)
        async for _ in stream:
            pass

    async def langchain_json_schema() -> None:
        async for _ in lc_openai.bind(response_format=response_format).astream(QUESTIONS["fa"][0]):
            pass

    async def langchain_anthropic_tools() -> None:
        async for _ in lc_anthropic.bind_tools([schema], tool_choice=schema["title"]).astream(QUESTIONS["fa"][0]):
            pass

    from chatbot.models._wire import Progress, open_stream
    from chatbot.models.chain import load_model

    ours = load_model("openai:gpt-4o-mini", base_url=double.openai_base_url, retries=0)

    async def wire_json_schema() -> None:
        reader = open_stream(ours, [HumanMessage(QUESTIONS["fa"][0])], schema, "json_schema")
        assert reader is not None
        async for _ in reader(Progress()):
            pass

    cases: dict[str, Callable[[], Awaitable[None]]] = {
        "ours: models/_wire.py reading json_schema": wire_json_schema,
        "openai SDK chat.completions.create(stream=True)": openai_sdk,
        "anthropic SDK messages.create(stream=True)": anthropic_sdk,
        "LangChain ChatOpenAI.astream (json_schema)": langchain_json_schema,
        "LangChain ChatAnthropic.astream (tools)": langchain_anthropic_tools,
    }
    result = {}
    for name, case in cases.items():
        await case()  # warm: connection, imports
        times = []
        for _ in range(repeat):
            started = time.thread_time()
            await case()
            times.append(time.thread_time() - started)
        result[name] = statistics.median(times) * 1000 / pieces
    await oai.close()
    await ant.close()
    return result


# -- the measurement -------------------------------------------------------------------------


async def measure(
    targets: list[Target], double: ProviderDouble, sizes: list[int], langs: list[str], args: argparse.Namespace
) -> Table:
    """Measure every target at every size and language, targets interleaved; print as it goes."""
    table = Table()
    for lang in langs:
        question, locale = QUESTIONS[lang]
        for chars in sizes:
            answer = answer_of(lang, chars)
            double.reset()
            double.default = Behaviour(answer=answer, piece_chars=args.piece_chars)
            runs = runs_for(chars, args.scale)
            order = targets[chars % len(targets) :] + targets[: chars % len(targets)]
            for target in order:
                if target.name == "offline" and table.get("offline", lang, 0) is not None:
                    continue
                cpu = await target.cpu_per_run(question, locale, runs)
                key = 0 if target.name == "offline" else chars
                table.cpu[(target.name, lang, key)] = cpu
                print(
                    f"  {lang} {chars:>6,d} chars  {target.name:<16} {cpu * 1000:9.1f} ms/run  ({runs} runs)",
                    flush=True,
                )
    return table


def report(table: Table, names: list[str], sizes: list[int], langs: list[str], piece_chars: int) -> None:
    """Print the table, the fits and the goals."""
    print(f"\nreplica CPU per run (ms), {piece_chars}-character pieces; per piece: (real - offline) / pieces")
    header = f"{'target':<16} {'lang':<4}" + "".join(f"{c:>10,d}" for c in sizes) + "   per piece (ms) at each size"
    print(header)
    for name in names:
        for lang in langs:
            if name == "offline":
                cpu = table.get(name, lang, 0)
                if cpu is not None:
                    print(f"{name:<16} {lang:<4}{cpu * 1000:10.1f}   (its own answer, any size)")
                continue
            offline = table.get("offline", lang, 0) or 0.0
            cells, per_piece = "", ""
            for chars in sizes:
                cpu = table.get(name, lang, chars)
                cells += f"{cpu * 1000:10.1f}" if cpu is not None else f"{'-':>10}"
                if cpu is not None:
                    pieces = payload_pieces(answer_of(lang, chars), piece_chars)
                    per_piece += f" {(cpu - offline) * 1000 / pieces:6.3f}"
            print(f"{name:<16} {lang:<4}{cells}  {per_piece}")
    print("\nfit over the English sweep: cpu = a + b*chars + c*chars^2")
    for name in names:
        if name == "offline":
            continue
        points = [(c, table.cpu[(name, "en", c)] * 1000) for c in sizes if (name, "en", c) in table.cpu]
        coef = fit(points)
        if coef:
            a, b, c = coef
            print(f"  {name:<16} {a:7.1f} ms + {b:.4f} ms/char + {c * 1e6:7.2f} ms per (1,000 chars)^2")
    print("\ngoals")
    for name in names:
        if name == "offline":
            continue
        for lang in langs:
            low, high = table.get(name, lang, 1500), table.get(name, lang, 12000)
            if low and high:
                ratio = high / low
                verdict = "holds" if ratio <= GOAL_RATIO else "MISSED"
                print(
                    f"  linear  {name:<16} {lang}: 12,000 / 1,500 = {ratio:5.2f}x (goal <= {GOAL_RATIO:g}x) {verdict}"
                )
    for name in names:
        floor, real = table.get("offline", "fa", 0), table.get(name, "fa", 1500)
        if name == "offline" or floor is None or real is None:
            continue
        piece_ms = (real - floor) * 1000 / payload_pieces(answer_of("fa", 1500), piece_chars)
        verdict = "holds" if piece_ms <= GOAL_PER_PIECE_MS else "MISSED"
        print(f"  per piece {name:<16} fa 1,500: {piece_ms:.3f} ms (goal <= {GOAL_PER_PIECE_MS}) {verdict}")


async def main(args: argparse.Namespace) -> None:
    """Start the replicas, measure, print."""
    os.environ.setdefault("OPENAI_API_KEY", "bench-key")
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench-key")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    langs = [s for s in args.langs.split(",") if s]
    names = [s for s in args.targets.split(",") if s]
    secret = secrets.token_urlsafe(48)
    settings = Settings(service_secret=SecretStr(secret), database_url="postgresql:///unused")
    with tempfile.TemporaryDirectory(prefix="chatbot-bench-old-") as tmp, ProviderDouble(keep_alive=True) as double:
        if args.sdk_floor:
            floor = await sdk_floor(double, 1500, args.piece_chars, 5)
            print(
                f"client CPU per piece of the SDKs alone (this process's main thread, 1,500 Persian chars, "
                f"{args.piece_chars}-char pieces)"
            )
            for name, ms in floor.items():
                print(f"  {name:<52} {ms:.3f} ms/piece")
        old_src = baseline_tree(args.baseline, Path(tmp)) if args.baseline else None
        if old_src is not None:
            names += [f"old {n}" for n in names if n in MODELS]
        async with bench_database("streaming") as url, AsyncExitStack() as stack:
            pool = make_pool(url, settings, name="bench-ingest", min_size=1, max_size=2)
            await pool.open(wait=True)
            try:
                await ingest_paths(pool, TENANT, [KB])
            finally:
                await pool.close()
            targets = []
            for name in names:
                pythonpath = old_src if name.startswith("old ") else None
                targets.append(
                    await stack.enter_async_context(replica(name, url, secret, settings, double, pythonpath))
                )
            for target in targets:  # warm: imports, connections, caches
                double.default = Behaviour(answer=persian_answer(300), piece_chars=args.piece_chars)
                for lang in langs:
                    for _ in range(2):
                        await target.run(*QUESTIONS[lang])
            await asyncio.sleep(1)
            for target in targets:
                target.idle = await idle_rate(target.pid, 2.0)
            print(f"\nreplicas: {', '.join(f'{t.name} pid {t.pid}' for t in targets)}; idle CPU subtracted", flush=True)
            table = await measure(targets, double, sizes, langs, args)
    report(table, names, sizes, langs, args.piece_chars)


def parse_args() -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="300,1500,6000,12000")
    parser.add_argument("--langs", default="en,fa")
    parser.add_argument("--targets", default="offline,json_schema,tools,anthropic")
    parser.add_argument("--piece-chars", type=int, default=4)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the runs per measurement")
    parser.add_argument("--baseline", default=None, help="a git revision: also measure its streaming code")
    parser.add_argument("--no-sdk-floor", dest="sdk_floor", action="store_false")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
