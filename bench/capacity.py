"""The highest steady arrival rate one replica holds with a real model's stream behind it.

One `chatbot serve` (one worker, 127.0.0.1), its provider the wire double in a process of
its own (so the double's CPU and this client's do not share one interpreter): every answer
is ~1,500 Persian characters in 4-character pieces, one piece every `--piece-ms` (30 ms),
after a first byte at `--first-byte-ms`. Runs arrive as a Poisson process at each rate for
`--seconds` (60), each on a fresh thread and user, the rate rising by `--step` until the
time to first token above the provider's own first answer character passes 250 ms at p99, or a run is
refused or fails. Printed per rate: runs, TTFT overhead p50/p99, replica CPU per run
(/proc utime + stime over the rate's runs, to their end), runs and replica sockets at peak,
and the CPU per run of the double's process and of this client (the machine's other users
of the two cores, beside Postgres).

With `--baseline REV` a second replica runs REV's whole `src/` (same database, same double)
and every rate is measured on both, one after the other (which goes first alternates), until
neither holds: old and new side by side in one run, under the same load.

The client is measurement apparatus and is kept cheap, since it shares the cores it
measures: it reads each response's raw bytes and looks for the `event: token`, `event: end`
and `event: error` lines (a name cut between two reads is still seen), never parsing an
event's JSON. The first read holding a token line is the time to first token. By default
(`--client raw`) each run is one HTTP/1.1 request written on a connection of its own
(`Connection: close`) and read with asyncio's streams, about half of httpx's CPU per
run; `--client httpx` sends them through httpx as the earlier figures did.

    .venv/bin/python -m bench.capacity [--seconds 60] [--start 2] [--step 2] [--path json_schema]
        [--baseline REV]   # also REV's src/, rate by rate beside this tree's
        [--client raw|httpx]

Uses CHATBOT_DATABASE_URL (migrated here) or an embedded Postgres in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import SecretStr

from bench._pg import bench_database
from bench.runs import KB, ROOT, SERVER_PIDS, server
from bench.streaming import MODELS, QUESTIONS, TENANT
from bench.worst_case_text import process_cpu
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.pool import make_pool
from chatbot.ids import UserId
from chatbot.retrieval.ingest import ingest_paths

GOAL_P99_MS = 250.0
GOAL_RATE = 8.0


def serve_double(chars: int, piece_ms: float, first_byte_ms: float) -> None:
    """Run the wire double (this process, `--serve-double`): print its port, stop when stdin closes."""
    from tests.fixtures.provider_double import Behaviour, ProviderDouble, persian_answer

    with ProviderDouble(keep_alive=True) as double:
        double.default = Behaviour(answer=persian_answer(chars), piece_chars=4)
        double.default.piece_delay, double.default.first_byte_delay = piece_ms / 1000, first_byte_ms / 1000
        print(double.port, flush=True)
        sys.stdin.read()


@dataclass
class Rate:
    """What one arrival rate gave."""

    rate: float
    overheads: list[float] = field(default_factory=list)
    failed: int = 0
    started: int = 0
    peak_runs: int = 0
    peak_sockets: int = 0
    cpu: float = 0.0
    double_cpu: float = 0.0
    client_cpu: float = 0.0

    def p(self, q: float) -> float:
        ms = sorted(self.overheads)
        return ms[min(len(ms) - 1, round(q * (len(ms) - 1)))] if ms else float("inf")

    @property
    def held(self) -> bool:
        return self.failed == 0 and bool(self.overheads) and self.p(0.99) <= GOAL_P99_MS


def provider_first_answer_byte(first_byte_ms: float, piece_ms: float) -> float:
    """Return the seconds after the request at which the double writes the answer's first character.

    The structured object opens with `{"status": "answered", "answer": "`: the pieces before
    the first answer character go out one every `piece_ms` after the first byte.
    """
    from tests.fixtures.provider_double import persian_answer

    text = json.dumps({"status": "answered", "answer": persian_answer(10), "citations": []}, ensure_ascii=False)
    return (first_byte_ms + text.index(persian_answer(1)) // 4 * piece_ms) / 1000


def sockets(pid: int) -> int:
    """Return how many sockets the process has open."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return count


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the replica listens, and how this client talks to it."""

    host: str
    port: int
    client: httpx.AsyncClient
    raw: bool


async def one_run(endpoint: Endpoint, settings: Settings, first_byte: float, result: Rate, live: list[int]) -> None:
    """Run one question on a fresh thread; record its first-token overhead or its failure."""
    question, locale = QUESTIONS["fa"]
    user = f"cap-{uuid.uuid4().hex[:10]}"
    token = mint_token(settings, tenant=TENANT, user=UserId(user), locale=locale, ttl=3600)
    path = f"/v1/threads/t-{user}/runs"
    body = json.dumps({"message": {"content": question}}).encode()
    live[0] += 1
    result.peak_runs = max(result.peak_runs, live[0])
    started = time.perf_counter()
    try:
        read = _raw_run if endpoint.raw else _httpx_run
        status, first, ended, errored = await read(endpoint, path, token, body, started)
        if status != 200 or errored or not ended or first is None:
            result.failed += 1
        else:
            result.overheads.append((first - first_byte) * 1000)
    except (httpx.HTTPError, OSError, ValueError):
        result.failed += 1
    finally:
        live[0] -= 1


class _Scan:
    """Notes the first token, the end and an error in a response's bytes, without parsing events."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first: float | None = None
        self.ended = self.errored = False
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        window = self._tail + chunk  # an event name cut between two reads is still seen
        if self.first is None and b"event: token" in window:
            self.first = time.perf_counter() - self.started
        self.ended = self.ended or b"event: end" in window
        self.errored = self.errored or b"event: error" in window
        self._tail = window[-16:]


async def _httpx_run(endpoint: Endpoint, path: str, token: str, body: bytes,
                     started: float) -> tuple[int, float | None, bool, bool]:  # fmt: skip
    """Send the run through httpx (`--client httpx`, the client of the earlier figures)."""
    scan = _Scan(started)
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream", "Content-Type": "application/json"}
    async with endpoint.client.stream("POST", path, content=body, headers=headers) as response:
        async for chunk in response.aiter_raw():
            scan.feed(chunk)
    return response.status_code, scan.first, scan.ended, scan.errored


async def _raw_run(endpoint: Endpoint, path: str, token: str, body: bytes,
                   started: float) -> tuple[int, float | None, bool, bool]:  # fmt: skip
    """Send the run on a connection of its own and read the bytes until the replica closes it.

    `Connection: close` ends the response with the connection, so the chunked framing need
    not be read: each SSE flush is one chunk, so no event name is cut by a chunk header.
    """
    scan = _Scan(started)
    reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {endpoint.host}:{endpoint.port}\r\nAuthorization: Bearer {token}\r\n"
            f"Accept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        status = int((await reader.readline()).split()[1])
        while chunk := await reader.read(65536):
            scan.feed(chunk)
    finally:
        writer.close()
    return status, scan.first, scan.ended, scan.errored


async def at_rate(endpoint: Endpoint, settings: Settings, pid: int, rate: float, seconds: float,
                  first_byte: float, rng: random.Random, double_pid: int) -> Rate:  # fmt: skip
    """Send Poisson arrivals at `rate` for `seconds`; wait for every run to end."""
    result = Rate(rate)
    live = [0]
    tasks: list[asyncio.Task[None]] = []
    before, double_before, client_before = process_cpu(pid), process_cpu(double_pid), time.process_time()
    end = time.monotonic() + seconds

    async def sample() -> None:
        while True:
            result.peak_sockets = max(result.peak_sockets, sockets(pid))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    while time.monotonic() < end:
        tasks.append(asyncio.create_task(one_run(endpoint, settings, first_byte, result, live)))
        await asyncio.sleep(rng.expovariate(rate))
    await asyncio.gather(*tasks)
    sampler.cancel()
    result.started = len(tasks)
    runs = max(1, len(tasks))
    result.cpu = (process_cpu(pid) - before) / runs
    result.double_cpu = (process_cpu(double_pid) - double_before) / runs
    result.client_cpu = (time.process_time() - client_before) / runs
    return result


def run(args: argparse.Namespace) -> None:
    """Start the double in its own process, measure, stop it."""
    double = subprocess.Popen(
        [sys.executable, "-m", "bench.capacity", "--serve-double", "--chars", str(args.chars),
         "--piece-ms", str(args.piece_ms), "--first-byte-ms", str(args.first_byte_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, text=True,
    )  # fmt: skip
    try:
        assert double.stdout is not None
        old_src = baseline_src(args.baseline) if args.baseline else None
        asyncio.run(main(args, int(double.stdout.readline()), double.pid, old_src))
    finally:
        if double.stdin:
            double.stdin.close()
        try:
            double.wait(15)
        except subprocess.TimeoutExpired:
            double.kill()


@dataclass
class Target:
    """One replica measured: this tree's code or the baseline's."""

    label: str
    pid: int
    endpoint: Endpoint
    best: Rate | None = None
    done: bool = False


def baseline_src(rev: str) -> Path:
    """Return a temporary copy of `src/` as it was at `rev` (removed at exit)."""
    old = Path(tempfile.mkdtemp(prefix="chatbot-bench-old-"))
    atexit.register(shutil.rmtree, old, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    return old / "src"


async def main(args: argparse.Namespace, port: int, double_pid: int, old_src: Path | None) -> None:
    """Start the replica (and the baseline's); raise the rate until none holds."""
    secret = secrets.token_urlsafe(48)
    settings = Settings(service_secret=SecretStr(secret), database_url="postgresql:///unused")
    spec, provider = MODELS[args.path]
    base_url = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    env = {"CHATBOT_MODEL": spec, "CHATBOT_MODEL_BASE_URL": base_url, "OPENAI_API_KEY": "bench-key",
           "ANTHROPIC_API_KEY": "bench-key"}  # fmt: skip
    first_byte = provider_first_answer_byte(args.first_byte_ms, args.piece_ms)
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(bench_database("capacity"))
        pool = make_pool(url, settings, name="bench-ingest", min_size=1, max_size=2)
        await pool.open(wait=True)
        try:
            await ingest_paths(pool, TENANT, [KB])
        finally:
            await pool.close()
        # The baseline: REV's whole src/, the rest (benches, the tests' double) as today.
        trees: list[tuple[str, dict[str, str]]] = [("new", env)]
        if old_src is not None:
            trees.append((f"old {args.baseline}", env | {"PYTHONPATH": str(old_src)}))
        targets: list[Target] = []
        for label, tree_env in trees:
            base = await stack.enter_async_context(server(url, secret, **tree_env))  # type: ignore[arg-type]
            client = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=120, limits=limits))
            address = httpx.URL(base)
            endpoint = Endpoint(address.host, address.port or 80, client, raw=args.client == "raw")
            targets.append(Target(label, SERVER_PIDS[base], endpoint))
        rng = random.Random(8)
        for target in targets:
            await at_rate(target.endpoint, settings, target.pid, 2, 3, first_byte, rng, double_pid)  # warm
        print(
            f"{args.path}, {args.chars} Persian chars, a piece every {args.piece_ms:g} ms, first byte at "
            f"{args.first_byte_ms:g} ms, first answer character at {first_byte * 1000:.0f} ms (subtracted), "
            f"{args.seconds:g} s per rate; replicas: " + ", ".join(f"{t.label} pid {t.pid}" for t in targets)
        )
        print(
            f"{'code':>12} {'runs/s':>7} {'runs':>5} {'failed':>6} {'TTFT over p50':>14} {'p99 (ms)':>9} "
            f"{'CPU/run (ms)':>13} {'runs at peak':>13} {'sockets at peak':>16} {'double CPU/run':>15} "
            f"{'client CPU/run':>15}  load"
        )
        rate = args.start
        turn = 0
        while rate <= args.max_rate and not all(t.done for t in targets):
            order = targets if turn % 2 == 0 else targets[::-1]
            for target in order:
                if target.done:
                    continue
                result = await at_rate(target.endpoint, settings, target.pid, rate, args.seconds, first_byte, rng,
                                       double_pid)  # fmt: skip
                print(
                    f"{target.label:>12} {rate:7.1f} {result.started:5d} {result.failed:6d} {result.p(0.5):14.1f} "
                    f"{result.p(0.99):9.1f} {result.cpu * 1000:13.1f} {result.peak_runs:13d} "
                    f"{result.peak_sockets:16d} {result.double_cpu * 1000:15.1f} {result.client_cpu * 1000:15.1f}"
                    f"  {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
                if result.held:
                    target.best = result
                else:
                    target.done = True
            rate += args.step
            turn += 1
        for target in targets:
            best = target.best
            if best is None:
                print(f"{target.label}: no rate held")
                continue
            verdict = "holds" if best.rate >= GOAL_RATE else "MISSED"
            print(
                f"{target.label}: highest rate held: {best.rate:g} runs/s (goal >= {GOAL_RATE:g}) {verdict}; "
                f"CPU per run {best.cpu * 1000:.1f} ms; runs in flight at peak {best.peak_runs}, "
                f"replica sockets at peak {best.peak_sockets}"
            )


def parse_args() -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="arrivals per rate")
    parser.add_argument("--start", type=float, default=2.0)
    parser.add_argument("--step", type=float, default=2.0)
    parser.add_argument("--max-rate", type=float, default=40.0)
    parser.add_argument("--path", default="json_schema", choices=list(MODELS))
    parser.add_argument("--chars", type=int, default=1500)
    parser.add_argument("--piece-ms", type=float, default=30.0)
    parser.add_argument("--first-byte-ms", type=float, default=200.0)
    parser.add_argument("--client", default="raw", choices=["raw", "httpx"], help="how runs are sent and read")
    parser.add_argument("--baseline", default=None, help="a git revision: measure its src/ too, rate by rate")
    parser.add_argument("--serve-double", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.serve_double:
        serve_double(arguments.chars, arguments.piece_ms, arguments.first_byte_ms)
    else:
        run(arguments)
