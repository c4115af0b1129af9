"""What budgets admit and what they cost a run.

1. Admission: a tenant budget that fits N runs' actual spend (N=30, measured on a probe run
   of another tenant), the wire double billing a fixed usage per call. Sent one after
   another (N + 10 runs, alternating between two in-process replicas on one database): the
   share of N answered. Sent at once (40 runs, two replicas): the share of N answered, and
   whether spend ever passed the limit.
2. The statements alone, sequentially: the early hold of a tenant with no budget (the
   function finds none and writes nothing), the early hold and the model step's sizing of a
   tenant with a tenant budget and an each-user default, and the settlement.
3. Time to the first token of streamed runs through the double, interleaved: budgets off
   (no statement), a tenant without budgets (the early hold finds none; no sizing), and a
   tenant with two budgets that never refuse (early hold, sizing at the model step, settled
   beside the usage totals): the median and p95 of each, and the differences.

Usage: python -m bench.budgets [--calls 300] [--runs 60]

Uses CHATBOT_DATABASE_URL (migrated here) or an embedded Postgres in a temp dir; the
service runs in-process (ASGI), the double on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import jwt
from pydantic import SecretStr
from tests.fixtures.provider_double import Behaviour, ProviderDouble

from bench._pg import bench_database, bench_settings, started_app
from chatbot.budgets.admin import BudgetTarget, set_budget
from chatbot.budgets.service import Budgets
from chatbot.config import Settings
from chatbot.db.pool import open_pool
from chatbot.ids import TenantId, UserId
from chatbot.responses import ModelCallUsage

SECRET = "bench-secret-" + "b5" * 24
MODEL = "openai:gpt-4o-mini"
QUESTION = "What does travel insurance cover for medical costs abroad?"


def settings(url: str, **values: Any) -> Settings:
    # Tokens are signed here with SECRET; logs at the service's default level, as this bench always measured.
    return bench_settings(
        url, service_secret=SecretStr(SECRET), log_level=Settings.model_fields["log_level"].default, **values
    )


def token(tenant: str, user: str) -> str:
    now = int(time.time())
    claims = {"iss": "main-backend", "aud": "chatbot-agent", "iat": now, "exp": now + 3600}
    return jwt.encode(claims | {"tenant_id": tenant, "user_id": user, "locale": "en-US"}, SECRET)


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
    }


async def statements(url: str, calls: int) -> dict[str, Any]:
    async with open_pool(settings(url), max_size=2) as pool:
        await set_budget(pool, BudgetTarget(TenantId("capped"), "tenant"), "day", "tokens", Decimal(10**15))
        await set_budget(pool, BudgetTarget(TenantId("capped"), "each_user"), "day", "tokens", Decimal(10**15))
        budgets = Budgets(pool, prices={}, output_cap=4096, reservation_seconds=600)
        times: dict[str, list[float]] = {
            "early hold, no budget": [],
            "early hold, 2 budgets": [],
            "sizing at the model step, 2 budgets": [],
            "settle, 2 budgets": [],
        }
        for i in range(calls):
            started = time.perf_counter()
            await budgets.admit(TenantId("free"), UserId(f"u{i % 20}"), [MODEL], input_floor=600)
            times["early hold, no budget"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            held = await budgets.admit(TenantId("capped"), UserId(f"u{i % 20}"), [MODEL], input_floor=600)
            times["early hold, 2 budgets"].append((time.perf_counter() - started) * 1000)
            assert held is not None
            started = time.perf_counter()
            await budgets.size(held, model=MODEL, input_tokens=900, spent=[])
            times["sizing at the model step, 2 budgets"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await budgets.settle(
                held, [ModelCallUsage(kind="answer", model=MODEL, input_tokens=1000, output_tokens=200)]
            )
            times["settle, 2 budgets"].append((time.perf_counter() - started) * 1000)
        await budgets.close()
    return {"calls": calls, **{name: summary(values) for name, values in times.items()}}


def _headers(tenant: str, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant, user)}"}


async def _run(client: httpx.AsyncClient, thread: str, tenant: str, user: str) -> tuple[str, float | None]:
    """Stream one run; return how it ended (answered, or the status / error reason) and its TTFT in ms."""
    started = time.perf_counter()
    first: float | None = None
    last_event = ""
    reason = ""
    body = {"message": {"content": QUESTION}}
    async with client.stream("POST", f"/v1/threads/{thread}/runs", json=body, headers=_headers(tenant, user)) as r:
        if r.status_code != 200:
            return str(r.status_code), None
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
                last_event = event
                if event == "token" and first is None:
                    first = time.perf_counter()
            elif line.startswith("data:") and event == "error":
                reason = json.loads(line[5:]).get("reason", "")
    ttft = None if first is None else (first - started) * 1000
    return ("answered" if last_event == "end" else f"error:{reason}"), ttft


async def _spent(pool: Any, tenant: str) -> float:
    from chatbot.budgets.admin import report

    rows = await report(pool, TenantId(tenant), datetime.now(UTC))
    return max((r["spent"] for r in rows if r["scope"] == "tenant"), default=0.0)


async def admission(url: str, base_url: str, n: int, concurrent: int) -> dict[str, Any]:
    config = settings(url, model=MODEL, model_base_url=base_url)
    async with started_app(config) as a, started_app(config) as b:
        pool = a.state.services.pool
        clients = [
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=60)
            for app in (a, b)
        ]
        try:
            await set_budget(pool, BudgetTarget(TenantId("probe"), "tenant"), "day", "tokens", Decimal(10**12))
            assert (await _run(clients[0], "probe", "probe", "u0"))[0] == "answered"
            spend = await _spent(pool, "probe")
            limit = n * spend
            await set_budget(pool, BudgetTarget(TenantId("seq"), "tenant"), "day", "tokens", Decimal(limit))
            sequential = [(await _run(clients[i % 2], f"seq-{i}", "seq", "u1"))[0] for i in range(n + 10)]
            await set_budget(pool, BudgetTarget(TenantId("burst"), "tenant"), "day", "tokens", Decimal(limit))
            highest = 0.0
            sampling = True

            async def sample() -> None:
                nonlocal highest
                from chatbot.budgets.admin import report

                while sampling:  # not polling: a sampler of spent plus held, every 10 ms
                    for row in await report(pool, TenantId("burst"), datetime.now(UTC)):
                        highest = max(highest, row["spent"] + row["reserved"])
                    await asyncio.sleep(0.01)

            sampler = asyncio.create_task(sample())
            burst = await asyncio.gather(
                *(_run(clients[i % 2], f"burst-{i}", "burst", f"u{i % 8}") for i in range(concurrent))
            )
            sampling = False
            await sampler
            burst_spent = await _spent(pool, "burst")
        finally:
            for client in clients:
                await client.aclose()
    outcomes = [o for o, _ in burst]
    return {
        "one_run_spend_tokens": spend,
        "budget_tokens": limit,
        "sequential": {
            "sent": n + 10,
            "answered": sequential.count("answered"),
            "share_of_n": round(sequential.count("answered") / n, 3),
            "first_refusal_at": sequential.index("429") + 1 if "429" in sequential else None,
        },
        f"{concurrent}_at_once_two_replicas": {
            "answered": outcomes.count("answered"),
            "share_of_n": round(outcomes.count("answered") / n, 3),
            "refused_429": outcomes.count("429"),
            "refused_mid_stream": sum(o.startswith("error:budget") for o in outcomes),
            "highest_spent_plus_held": highest,
            "spent": burst_spent,
            "overspent": highest > limit or burst_spent > limit,
        },
    }


async def ttft(url: str, base_url: str, count: int) -> dict[str, Any]:
    async with started_app(settings(url, model=MODEL, model_base_url=base_url)) as app:
        service = app.state.services.runs
        checker = service.budgets
        pool = app.state.services.pool
        await set_budget(pool, BudgetTarget(TenantId("capped"), "tenant"), "day", "tokens", Decimal(10**14))
        await set_budget(pool, BudgetTarget(TenantId("capped"), "each_user"), "day", "tokens", Decimal(10**14))
        transport = httpx.ASGITransport(app=app)
        variants = {"budgets off": "free", "no budget": "free", "budgets": "capped"}
        times: dict[str, list[float]] = {name: [] for name in variants}
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as client:
            for i in range(count + 10):
                order = list(variants)[i % 3 :] + list(variants)[: i % 3]
                for name in order:
                    service.budgets = None if name == "budgets off" else checker
                    thread = f"{name.replace(' ', '-')}-{i}"
                    outcome, first = await _run(client, thread, variants[name], f"u{i % 20}")
                    assert outcome == "answered" and first is not None, outcome
                    if i >= 10:  # the first runs warm the pool and the caches
                        times[name].append(first)
        service.budgets = checker
    medians = {name: summary(values) for name, values in times.items()}
    base = medians["budgets off"]["median_ms"]
    return {
        "runs_each": count,
        **medians,
        "added_median_ms": {name: round(medians[name]["median_ms"] - base, 3) for name in ("no budget", "budgets")},
    }


async def main(calls: int, count: int) -> None:
    os.environ.setdefault("OPENAI_API_KEY", "bench-key")
    async with bench_database("budgets") as url:
        with ProviderDouble() as double:
            double.default = Behaviour(usage=(300, 60, 0))
            print(json.dumps({"admission": await admission(url, double.openai_base_url, 30, 40)}, indent=2))
        print(json.dumps({"statements": await statements(url, calls)}, indent=2))
        with ProviderDouble() as double:
            double.default = Behaviour(usage=(300, 60, 0))
            print(json.dumps({"ttft": await ttft(url, double.openai_base_url, count)}, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.runs))
