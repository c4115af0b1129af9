"""Provider calls per answered turn, and what a fallback adds to the first token, through the wire double.

1. A 20-turn conversation (Persian, ~1,500-character answers, a few turns telling the
   service something about the customer) on OpenAI json_schema: every provider call the
   service makes (answers, summary folds, memory extraction) counted at the double.
   Goal: at most 1.2 calls per answered turn.
2. Time to first token with the chain `openai:gpt-4o-mini,anthropic:claude-haiku-4-5`
   when the first entry fails at once (HTTP 503), beside the second entry alone, runs
   interleaved. Goal: under 100 ms added (median).

Usage: python -m bench.providers [--turns 20] [--ttft-runs 30]
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
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from pydantic import SecretStr
from tests.fixtures.provider_double import Behaviour, ProviderDouble, persian_answer

from bench._pg import bench_database, bench_settings, started_app
from chatbot.config import Settings

SECRET = "bench-secret-" + "q7" * 24
STATEMENTS = {3: "من یک پژو ۲۰۶ دارم و در اصفهان زندگی می‌کنم.", 9: "I live in Shiraz with my wife and two kids."}


def settings(url: str, **values: Any) -> Settings:
    # Tokens are signed here with SECRET; logs at the service's default level, as this bench always measured.
    return bench_settings(
        url, service_secret=SecretStr(SECRET), log_level=Settings.model_fields["log_level"].default, **values
    )


def token(user: str) -> str:
    import jwt

    now = int(time.time())
    claims = {"iss": "main-backend", "aud": "chatbot-agent", "iat": now, "exp": now + 600}
    return jwt.encode(claims | {"tenant_id": "acme", "user_id": user, "locale": "fa-IR"}, SECRET)


async def run(client: httpx.AsyncClient, thread: str, content: str, user: str) -> tuple[str, float | None]:
    """Run one message; return its terminal event and the seconds to its first token."""
    started = time.perf_counter()
    first: float | None = None
    terminal = ""
    headers = {"Authorization": f"Bearer {token(user)}"}
    async with client.stream(
        "POST", f"/v1/threads/{thread}/runs", json={"message": {"content": content}}, headers=headers
    ) as response:
        async for line in response.aiter_lines():
            if line == "event: token" and first is None:
                first = time.perf_counter() - started
            if line in ("event: end", "event: error"):
                terminal = line.removeprefix("event: ")
    return terminal, first


@asynccontextmanager
async def in_app(values: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """Yield a started app of `values` and an in-process client of it."""
    async with (
        started_app(values) as app,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=60) as client,
    ):
        yield app, client


async def calls_per_turn(url: str, double: ProviderDouble, turns: int) -> dict[str, Any]:
    double.reset()
    double.default = Behaviour(answer=persian_answer(1500), text="- مشتری درباره بیمه سفر پرسید")
    async with in_app(settings(url, model="openai:gpt-4o-mini", model_base_url=double.openai_base_url)) as (
        app,
        client,
    ):
        answered = 0
        for turn in range(turns):
            content = STATEMENTS.get(turn, f"بیمه سفر هزینه‌های درمان در خارج از کشور را پوشش می‌دهد؟ ({turn})")
            terminal, _ = await run(client, "calls-per-turn", content, "u-calls")
            answered += terminal == "end"
        await app.state.services.memory.drain(10)
    kinds = [r.kind for r in double.requests]
    return {
        "turns": turns,
        "answered": answered,
        "provider_calls": len(kinds),
        "structured_calls": kinds.count("json") + kinds.count("tool"),
        "plain_calls": kinds.count("text"),
        "calls_per_answered_turn": round(len(kinds) / max(1, answered), 3),
        "goal": "<= 1.2",
    }


async def fallback_ttft(url: str, double: ProviderDouble, runs: int) -> dict[str, Any]:
    double.reset()
    double.default = Behaviour(answer=persian_answer(300))
    chain = settings(
        url,
        model="openai:gpt-4o-mini,anthropic:claude-haiku-4-5",
        model_base_urls=f"{double.openai_base_url},{double.anthropic_base_url}",
    )
    alone = settings(url, model="anthropic:claude-haiku-4-5", model_base_url=double.anthropic_base_url)
    ttft: dict[str, list[float]] = {"fallback": [], "alone": []}
    async with AsyncExitStack() as stack:
        clients = {
            name: (await stack.enter_async_context(in_app(values)))[1]
            for name, values in (("fallback", chain), ("alone", alone))
        }
        for i in range(runs):
            for name in ("fallback", "alone") if i % 2 else ("alone", "fallback"):
                if name == "fallback":
                    double.script("gpt-4o-mini", Behaviour(http_status=503))
                terminal, first = await run(clients[name], f"ttft-{name}-{i}", "بیمه سفر چه چیزی را پوشش می‌دهد؟", "u")
                if terminal == "end" and first is not None:
                    ttft[name].append(first * 1000)
    medians = {name: round(statistics.median(values), 1) for name, values in ttft.items()}
    return {
        "runs": runs,
        "ttft_ms_median": medians,
        "added_ms": round(medians["fallback"] - medians["alone"], 1),
        "goal": "< 100 ms added",
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--ttft-runs", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "bench-key")
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench-key")
    async with bench_database("providers") as url:
        with ProviderDouble() as double:
            calls = await calls_per_turn(url, double, args.turns)
            print(json.dumps({"calls_per_turn": calls}, ensure_ascii=False))
            fallback = await fallback_ttft(url, double, args.ttft_runs)
            print(json.dumps({"fallback": fallback}, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main())
