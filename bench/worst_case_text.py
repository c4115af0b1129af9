"""Measure the worst-case legal messages: CPU per request, and another tenant's first token beside eight.

U+FDFA is one character that NFKC makes 18, so an 8,000-character "remember
that ..." became 144,000 characters inside the memory extraction and the PII guard, on the
event loop. This bench prints, for the worst cases found:

Part 1 (in this process, no database):
  - the characters with the longest NFKC expansion (a scan over every code point);
  - per message, the CPU (`time.process_time`, this process) of the text work a request does
    on it: memory extraction with the PII guard (`extract_offline`), the writer's guard on
    the facts it keeps, the offline responder's checks and the retrieval query forms.

Part 2 (a real `chatbot serve` on 127.0.0.1, offline model, one worker, as bench/runs.py):
  - CPU per request: the replica process's utime + stime (/proc/<pid>/stat) over
    `--requests` sequential runs of one message (JSON), counted until the replica is idle
    again, so the memory writer's work after each answer is included; minus the idle
    replica's own CPU over the same time; divided by the runs;
  - another tenant's time to first token (a normal question over SSE, to its first `token`
    event), alone and while eight worst-case messages of one tenant are being answered
    (sent at once; the question follows them by 0 to 0.5 s, spread over `--rounds` rounds),
    median and worst.

    .venv/bin/python -m bench.worst_case_text [--requests 10] [--rounds 5]

Uses CHATBOT_DATABASE_URL (migrated here) or starts an embedded Postgres in a temp dir. Two
shared cores: compare the figures beside each other, not with another machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import statistics
import time
import unicodedata
from pathlib import Path

import httpx
from pydantic import SecretStr

from bench._pg import bench_database
from bench.runs import KB, SERVER_PIDS, server
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.pool import make_pool
from chatbot.ids import TenantId, UserId
from chatbot.memory import _pii_numbers, pii
from chatbot.memory.extraction import extract_offline
from chatbot.models.offline import _is_vague, wants_human
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.normalize import query_form, search_form
from chatbot.retrieval.search import MAX_QUERY_CHARS

LIMIT = 8000  # the longest message the API takes
TRIGGER = "remember that "
QUESTION = "What does travel insurance cover for medical costs abroad?"
OTHER_TENANT = TenantId("bench-other")
HEAVY_TENANT = "bench-heavy"
# The guard's cap on what it reads (before it, the same message is as legal and as costly).
CAP = getattr(pii, "MAX_CHECKED_CHARS", 10_000)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STAGGER = 0.5  # seconds: the latest another tenant's question is sent after the eight


def top_expansions(count: int = 6) -> list[tuple[str, int]]:
    """Return the characters NFKC lengthens most, with their expanded lengths."""
    lengths = (
        (chr(cp), len(unicodedata.normalize("NFKC", chr(cp)))) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF
    )
    return sorted(lengths, key=lambda item: -item[1])[:count]


def _clean_digits(count: int, rng: random.Random) -> str:
    """Return digits no 10-, 16- or 24-digit window of which passes the ID, card or Sheba check.

    So the guard finds nothing early and checks every window to the end: its costliest text.
    """
    digits = ""
    while len(digits) < count:
        for d in rng.sample("0123456789", 10):
            tail = digits + d
            if len(tail) >= 10 and len(set(tail[-10:])) > 1 and _pii_numbers._national_id_checksum_ok(tail[-10:]):
                continue
            if len(tail) >= 16 and len(set(tail[-16:])) > 1 and _pii_numbers._luhn_ok(tail[-16:]):
                continue
            if len(tail) >= 24 and _pii_numbers._iban_ok("ir" + tail[-24:]):
                continue
            digits = tail
            break
        else:
            raise RuntimeError("no digit keeps every window clean")
    return digits


def worst_cases() -> dict[str, str]:
    """Return the worst-case legal messages (at most 8,000 characters each), by name."""
    # "⒈".."⒐" are "1.".."9." under NFKC and U+1F100 is "0.": digit-and-dot soup, the text the
    # guard spends most on per character (every group starts windows), up to the cap.
    dotted = {str(n): chr(0x2487 + n) for n in range(1, 10)} | {"0": "\U0001f100"}
    soup = "".join(dotted[d] for d in _clean_digits((CAP - len(TRIGGER)) // 2, random.Random(24)))
    cases = {
        "U+FDFA x 7,986 (the issue's)": TRIGGER + "\ufdfa" * (LIMIT - len(TRIGGER)),
        "U+FDFA x 8,000, no trigger": "\ufdfa" * LIMIT,
        "U+FDFB x 7,986": TRIGGER + "\ufdfb" * (LIMIT - len(TRIGGER)),
        "U+33AF x 7,986": TRIGGER + "\u33af" * (LIMIT - len(TRIGGER)),
        "U+2475 x 7,986": TRIGGER + "\u2475" * (LIMIT - len(TRIGGER)),
        "digit soup to the cap (U+2488..)": TRIGGER + soup,
        "ASCII digit soup 1.2.3. (8,000)": (TRIGGER + ".".join(_clean_digits(LIMIT, random.Random(7))))[:LIMIT],
        "commas: x,,,,...,y": TRIGGER + "x" + "," * (LIMIT - len(TRIGGER) - 2) + "y",
        "talk talk talk ...": (TRIGGER + "talk " * LIMIT)[:LIMIT],
        # What the guard's normalisation reads as one number or one word (memory/pii.py).
        "digits between U+034F (8,000)": (TRIGGER + "1\u034f" * LIMIT)[:LIMIT],
        "number words one two ... (8,000)": (TRIGGER + "one two three four five six seven eight nine " * LIMIT)[:LIMIT],
        "Persian number words (8,000)": (TRIGGER + "یک دو سه چهار پنج شش هفت هشت نه " * LIMIT)[:LIMIT],
        "letters one by one a b (8,000)": (TRIGGER + "a b " * LIMIT)[:LIMIT],
        "mixed separators 1-2.3 4,5+ (8,000)": (TRIGGER + "1-2.3 4,5+6/7*8~9 " * LIMIT)[:LIMIT],
    }
    assert all(len(text) <= LIMIT for text in cases.values())
    return cases


def text_work(message: str) -> None:
    """Do the text work one request does on `message` (offline model)."""
    candidates = extract_offline(message, locale="en-US")  # in the graph's generate step
    for fact in candidates.facts:  # the memory writer's guard, after the answer
        pii.rejection_reason(fact.text, category=fact.category)
    wants_human(message)
    _is_vague(message)
    query = message[:MAX_QUERY_CHARS]
    query_form(query)
    search_form(query)


def in_process_table(cases: dict[str, str], repeat: int) -> dict[str, float]:
    """Print and return the median CPU seconds of `text_work` per message."""
    print(f"\n{'message':36s} {'NFKC chars':>10s} {'text work CPU (s)':>18s}")
    costs = {}
    for name, message in cases.items():
        times = []
        for _ in range(repeat):
            started = time.process_time()
            text_work(message)
            times.append(time.process_time() - started)
        costs[name] = statistics.median(times)
        print(f"{name:36s} {len(unicodedata.normalize('NFKC', message)):10,d} {costs[name]:18.3f}")
    return costs


def process_cpu(pid: int) -> float:
    """Return a process's user + system CPU seconds so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def idle_rate(pid: int, seconds: float = 3.0) -> float:
    """Return the replica's CPU seconds per second while nothing is sent to it."""
    before = process_cpu(pid)
    await asyncio.sleep(seconds)
    return (process_cpu(pid) - before) / seconds


async def wait_idle(pid: int, rate: float, timeout: float = 60.0) -> None:
    """Wait until the replica's CPU use is back to its idle rate (its background work done)."""
    quiet, deadline = 0, time.monotonic() + timeout
    last = process_cpu(pid)
    while quiet < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        now = process_cpu(pid)
        quiet = quiet + 1 if now - last <= rate * 0.25 + 1.5 / CLOCK_TICKS else 0
        last = now


class Replica:
    """The replica under test: its client, its pid and tokens for the two tenants."""

    def __init__(self, base: str, pid: int, settings: Settings) -> None:
        """Keep what the measurements need."""
        self.client = httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=32))
        self.pid = pid
        self.settings = settings
        self.idle = 0.0
        self.serial = 0

    def auth(self, tenant: str, user: str) -> dict[str, str]:
        """Return an Authorization header for one tenant's user."""
        token = mint_token(self.settings, tenant=TenantId(tenant), user=UserId(user), locale="en-US", ttl=3600)
        return {"Authorization": f"Bearer {token}"}

    def thread(self, prefix: str) -> str:
        """Return a fresh thread id."""
        self.serial += 1
        return f"{prefix}-{self.serial}-{secrets.token_hex(3)}"

    async def run_json(self, tenant: str, user: str, content: str) -> None:
        """Send one run and wait for its JSON end."""
        headers = {**self.auth(tenant, user), "Accept": "application/json"}
        body = {"message": {"content": content}}
        response = await self.client.post(f"/v1/threads/{self.thread(user)}/runs", json=body, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"run answered {response.status_code}")

    async def first_token(self) -> float:
        """Return the seconds from sending another tenant's question to its first `token` event."""
        headers = {**self.auth(OTHER_TENANT, "u-other"), "Accept": "text/event-stream"}
        body = {"message": {"content": QUESTION}}
        started = time.perf_counter()
        first = None
        async with self.client.stream(
            "POST", f"/v1/threads/{self.thread('other')}/runs", json=body, headers=headers
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"run answered {response.status_code}")
            async for line in response.aiter_lines():
                if first is None and line == "event: token":
                    first = time.perf_counter() - started
        if first is None:
            raise RuntimeError("the stream had no token")
        return first

    async def cpu_per_request(self, content: str, requests: int) -> float:
        """Return the replica's CPU seconds per sequential run of `content`, its memory work included."""
        await wait_idle(self.pid, self.idle)
        before, started = process_cpu(self.pid), time.monotonic()
        for n in range(requests):
            await self.run_json(HEAVY_TENANT, f"u-cpu-{n}", content)
        await wait_idle(self.pid, self.idle)
        spent = process_cpu(self.pid) - before - self.idle * (time.monotonic() - started)
        return max(spent, 0.0) / requests

    async def ttft_beside(self, content: str | None, rounds: int) -> list[float]:
        """Return another tenant's first-token times, alone (`content` None) or beside eight runs of it.

        The question is sent from 0 to 0.5 s after the eight (spread over the rounds): a
        question that arrives while their text work is under way waits longest.
        """
        times = []
        for n in range(rounds):
            await wait_idle(self.pid, self.idle)
            heavy = [] if content is None else [self.run_json(HEAVY_TENANT, f"u-heavy-{i}", content) for i in range(8)]

            async def other(delay: float = STAGGER * n / max(rounds - 1, 1)) -> float:
                await asyncio.sleep(delay)
                return await self.first_token()

            first, *_ = await asyncio.gather(other(), *heavy)
            assert first is not None  # other()'s seconds; the eight runs return None
            times.append(first)
        await wait_idle(self.pid, self.idle)
        return times


def _ttft_line(label: str, times: list[float]) -> str:
    return f"  {label:44s} median {statistics.median(times):6.2f} s   worst {max(times):6.2f} s   ({len(times)} rounds)"


async def replica_part(cases: dict[str, str], costs: dict[str, float], requests: int, rounds: int) -> None:
    """Start a replica and print CPU per request and another tenant's time to first token."""
    secret = secrets.token_urlsafe(48)
    settings = Settings(service_secret=SecretStr(secret), database_url="postgresql:///unused")
    async with bench_database("worst_text") as url:
        pool = make_pool(url, settings, name="bench-ingest", min_size=1, max_size=2)
        await pool.open(wait=True)
        try:
            await ingest_paths(pool, OTHER_TENANT, [KB])
        finally:
            await pool.close()
        async with server(url, secret) as base:
            replica = Replica(base, SERVER_PIDS[base], settings)
            try:
                for _ in range(3):  # warm up: first imports, connections, caches
                    await replica.first_token()
                replica.idle = await idle_rate(replica.pid)
                print(f"\nreplica pid {replica.pid}: idle CPU {replica.idle * 1000:.1f} ms/s (subtracted below)")
                print(f"\n{'replica CPU per request (/proc, utime+stime)':52s} {'s':>7s}")
                normal = await replica.cpu_per_request(QUESTION, requests)
                print(f"  {'a normal question':50s} {normal:7.3f}")
                for name, content in cases.items():
                    print(f"  {name:50s} {await replica.cpu_per_request(content, requests):7.3f}")
                worst = max(costs, key=lambda name: costs[name])
                print(f"\nanother tenant's time to first token (worst in-process case: {worst})")
                alone = await replica.ttft_beside(None, rounds)
                print(_ttft_line("alone", alone))
                for name in dict.fromkeys(["U+FDFA x 7,986 (the issue's)", worst]):
                    beside = await replica.ttft_beside(cases[name], rounds)
                    print(_ttft_line(f"beside 8 x {name}", beside))
                    print(f"  {'':44s} median +{statistics.median(beside) - statistics.median(alone):.2f} s over alone")
            finally:
                await replica.client.aclose()


def main() -> None:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10, help="sequential runs per message for the CPU figure")
    parser.add_argument("--rounds", type=int, default=5, help="first-token measurements per setting")
    parser.add_argument("--repeat", type=int, default=5, help="in-process repetitions per message")
    parser.add_argument("--no-replica", action="store_true", help="part 1 only (no database)")
    args = parser.parse_args()
    print("longest NFKC expansions of one character:")
    for char, length in top_expansions():
        print(f"  U+{ord(char):04X} {unicodedata.name(char, '?')}: {length}")
    print(f"guard reads at most: {CAP:,d} characters" + ("" if hasattr(pii, "MAX_CHECKED_CHARS") else " (no cap)"))
    cases = worst_cases()
    costs = in_process_table(cases, args.repeat)
    if not args.no_replica:
        asyncio.run(replica_part(cases, costs, args.requests, args.rounds))


if __name__ == "__main__":
    main()
