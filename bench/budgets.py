"""What budgets cost a run: the reservation statement, and a whole run with and without budgets.

1. The statements alone, sequentially on one connection's pool: `reserve` of a tenant with
   no budget (the function finds none and writes nothing), `reserve` and `settle` of a
   tenant with a tenant budget and an each-user default (two counters locked, two
   reservation rows written, then settled).
2. Whole runs through the wire double (OpenAI, in-process service), JSON mode, interleaved:
   with the check switched off (no statement: the code before budgets), a tenant without
   budgets (the reservation statement finds none), and a tenant with a tenant and an
   each-user budget that never refuse (reserved, then settled beside the usage totals):
   the median time per run of each, and the differences.
3. The offline model (the anchors' path): runs of a tenant with budgets beside one without.
   The offline model costs nothing and is never checked: no statement is sent.

Usage: python -m bench.budgets [--calls 500] [--runs 100]

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
        await set_budget(pool, BudgetTarget("capped", "tenant"), "day", "tokens", Decimal(10**15))
        await set_budget(pool, BudgetTarget("capped", "each_user"), "day", "tokens", Decimal(10**15))
        budgets = Budgets(pool, prices={}, output_cap=4096, reservation_seconds=600)
        times: dict[str, list[float]] = {"reserve, no budget": [], "reserve, 2 budgets": [], "settle, 2 budgets": []}
        for i in range(calls):
            started = time.perf_counter()
            await budgets.reserve(
                TenantId("free"), UserId(f"u{i % 20}"), kind="answer", models=[MODEL], input_tokens=6600
            )
            times["reserve, no budget"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            held = await budgets.reserve(
                TenantId("capped"), UserId(f"u{i % 20}"), kind="answer", models=[MODEL], input_tokens=6600
            )
            times["reserve, 2 budgets"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await budgets.settle(
                held, [ModelCallUsage(kind="answer", model=MODEL, input_tokens=1000, output_tokens=200)]
            )
            times["settle, 2 budgets"].append((time.perf_counter() - started) * 1000)
    return {"calls": calls, **{name: summary(values) for name, values in times.items()}}


async def runs(url: str, model: str, base_url: str | None, count: int) -> dict[str, Any]:
    async with started_app(settings(url, model=model, model_base_url=base_url)) as app:
        service = app.state.services.runs
        checker = service.budgets
        pool = app.state.services.pool
        await set_budget(pool, BudgetTarget("capped", "tenant"), "day", "tokens", Decimal(10**15))
        await set_budget(pool, BudgetTarget("capped", "each_user"), "day", "tokens", Decimal(10**15))
        transport = httpx.ASGITransport(app=app)
        variants = {"unchecked": "free", "no budget": "free", "budgets": "capped"}
        times: dict[str, list[float]] = {name: [] for name in variants}
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as client:
            for i in range(count + 10):
                order = list(variants)[i % 3 :] + list(variants)[: i % 3]
                for name in order:
                    tenant = variants[name]
                    service.budgets = None if name == "unchecked" else checker
                    headers = {"Authorization": f"Bearer {token(tenant, f'u{i % 20}')}", "Accept": "application/json"}
                    body = {"message": {"content": QUESTION}}
                    started = time.perf_counter()
                    thread = f"{name.replace(' ', '-')}-{model}-{i}"
                    response = await client.post(f"/v1/threads/{thread}/runs", json=body, headers=headers)
                    elapsed = (time.perf_counter() - started) * 1000
                    assert response.status_code == 200, response.text
                    if i >= 10:  # the first runs warm the pool and the caches
                        times[name].append(elapsed)
        service.budgets = checker
    medians = {name: summary(values) for name, values in times.items()}
    base = medians["unchecked"]["median_ms"]
    return {
        "model": model,
        "runs_each": count,
        **medians,
        "added_median_ms": {name: round(medians[name]["median_ms"] - base, 3) for name in ("no budget", "budgets")},
    }


async def main(calls: int, count: int) -> None:
    os.environ.setdefault("OPENAI_API_KEY", "bench-key")
    async with bench_database("budgets") as url:
        print(json.dumps({"statements": await statements(url, calls)}, indent=2))
        with ProviderDouble() as double:
            double.default = Behaviour(usage=(1000, 200, 0))
            print(json.dumps({"wire double": await runs(url, MODEL, double.openai_base_url, count)}, indent=2))
        print(json.dumps({"offline": await runs(url, "offline", None, count)}, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.runs))
