"""Cost of the PII guard on adversarial 8,000-character messages, and the event-loop stall they cause.

Part 1 (no database) times, per adversarial "remember that ..." message, the median of
`--repeat` calls of:
  guard      `memory.pii.find_pii`, the whole guard, as it is now
  old scan   the generic-IBAN regex the guard used before the fix, alone, on the same
             normalised text (`[a-z]{2}[0-9]{2}(?:[ \\-]?[a-z0-9]{1,4}){3,8}(?![a-z0-9])`)
  extraction `memory.extraction.extract_offline`, what the memory writer runs per message
             (it calls the guard twice: on the statement and on its 300-character cut)

Part 2 (`--stall`, needs Postgres) runs the app in-process, sends `--runs` such messages as
runs (JSON), and meanwhile measures the event loop's longest stall (a 5 ms ticker's worst
lateness) and the slowest `/healthz` answer, until the memory writer is idle.

Part 3 (no database) measures the split-value check's false refusals: `--changes` random
changes of an ordinary number (mileage, street number, premium, year, age; English and
Persian wordings, `tests/fixtures/number_changes.py`), each run through the memory writer's
steps after the user's old value and two other facts. It prints the share refused, and the
share whose old value did not go to the history, by kind and language.

    .venv/bin/python -m bench.pii [--repeat 5] [--stall] [--runs 10] [--changes 2000] [--seed N]

Uses CHATBOT_DATABASE_URL (migrated here) or starts an embedded Postgres in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable

import httpx
from tests.fixtures.number_changes import KINDS, TRIGGERS, random_changes, writer_decision

from bench._pg import bench_app
from chatbot.cli.common import mint_token
from chatbot.ids import TenantId, UserId
from chatbot.memory.extraction import extract_offline
from chatbot.memory.pii import find_pii, normalize_for_pii

OLD_GENERIC_IBAN = re.compile(r"(?<![a-z0-9])[a-z]{2}[0-9]{2}(?:[ \-]?[a-z0-9]{1,4}){3,8}(?![a-z0-9])")
LIMIT = 8000


def _message(word: str) -> str:
    return ("remember that " + " ".join([word] * (LIMIT // (len(word) + 1) + 1)))[:LIMIT]


ADVERSARIAL = {
    "IBAN-like words (ab12 + 33 letters)": _message("ab12" + "c" * 33),
    "IBAN-like words (ab12 + 33 digits)": _message("ab12" + "1" * 33),
    "IBAN-like words (ir12 + 33 digits)": _message("ir12" + "3" * 33),
    "IBAN starts (ab12 ab12 ...)": _message("ab12"),
    "grouped IBAN lookalikes": _message("de89-3704-0044-0532-0130-0x"),
    "one-digit groups (1 1 1 ...)": _message("1"),
    "labelled numbers (card 1234)": _message("card 1234"),
    "Persian labels (کارت ۱۲۳۴)": _message("کارت ۱۲۳۴"),
    "plain English words": _message("hello"),
}


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def cost_table(repeat: int) -> None:
    """Print the guard's cost per adversarial message, beside the old scan's."""
    print(f"{'input (8,000 chars)':40s} {'guard ms':>9s} {'old scan ms':>12s} {'extraction ms':>14s}")
    for name, text in ADVERSARIAL.items():
        norm = normalize_for_pii(text)
        guard = _median_ms(lambda t=text: find_pii(t), repeat)  # type: ignore[misc]
        old = _median_ms(lambda n=norm: list(OLD_GENERIC_IBAN.finditer(n)), repeat)  # type: ignore[misc]
        extraction = _median_ms(lambda t=text: extract_offline(t, locale="en-US"), repeat)  # type: ignore[misc]
        print(f"{name:40s} {guard:9.1f} {old:12.1f} {extraction:14.1f}")


def false_refusals(count: int, seed: int) -> None:
    """Print how many benign number changes the writer refuses, and how many leave no history."""
    refused: Counter[tuple[str, str]] = Counter()
    unclosed: Counter[tuple[str, str]] = Counter()
    drawn: Counter[tuple[str, str]] = Counter()
    for change, others in random_changes(count, seed):
        decision = writer_decision(change, others)
        key = (change.kind, change.language)
        drawn[key] += 1
        refused[key] += decision.refused
        unclosed[key] += not decision.refused and not decision.closed
    print(f"\n{count} random number changes (seed {seed}): refused, and kept without the old value in the history")
    print(f"{'kind':10s} {'language':8s} {'changes':>8s} {'refused':>8s} {'no history':>11s}")
    for kind in KINDS:
        for language in TRIGGERS:
            key = (kind, language)
            print(f"{kind:10s} {language:8s} {drawn[key]:8d} {refused[key]:8d} {unclosed[key]:11d}")
    total, bad = sum(drawn.values()), sum(refused.values())
    print(f"false refusals: {bad} of {total} ({100 * bad / total:.2f} %); no history: {sum(unclosed.values())}")


async def stall(runs: int) -> None:
    """Print the worst event-loop stall and /healthz latency while adversarial runs are processed."""
    async with bench_app("pii") as (app, settings):
        token = mint_token(settings, tenant=TenantId("bench-pii"), user=UserId("u1"), locale="en-US", ttl=3600)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60) as client:
            worst_lag = worst_health = 0.0
            done = asyncio.Event()

            async def ticker() -> None:
                nonlocal worst_lag
                while not done.is_set():
                    started = time.perf_counter()
                    await asyncio.sleep(0.005)
                    worst_lag = max(worst_lag, time.perf_counter() - started - 0.005)

            async def health() -> None:
                nonlocal worst_health
                while not done.is_set():
                    started = time.perf_counter()
                    assert (await client.get("/healthz")).status_code == 200
                    worst_health = max(worst_health, time.perf_counter() - started)
                    await asyncio.sleep(0.01)

            watchers = [asyncio.create_task(ticker()), asyncio.create_task(health())]
            words = list(ADVERSARIAL.values())
            for i in range(runs):
                body = {"message": {"content": words[i % len(words)]}}
                response = await client.post(f"/v1/threads/bench-pii-{i}/runs", json=body, headers=headers)
                assert response.status_code == 200, response.text
            await app.state.services.memory.drain(60)  # the writer's extraction and guard calls run here
            done.set()
            await asyncio.gather(*watchers)
            print(f"runs: {runs} adversarial 8,000-character messages (JSON), memory writer drained")
            print(f"worst event-loop stall: {worst_lag * 1000:.1f} ms")
            print(f"slowest /healthz:       {worst_health * 1000:.1f} ms")


def main() -> None:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stall", action="store_true", help="also measure the loop stall in the app (Postgres)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--changes", type=int, default=2000, help="benign number changes to judge (0: none)")
    parser.add_argument("--seed", type=int, default=20261206)
    args = parser.parse_args()
    cost_table(args.repeat)
    if args.changes:
        false_refusals(args.changes, args.seed)
    if args.stall:
        asyncio.run(stall(args.runs))


if __name__ == "__main__":
    main()
