"""Cancelling runs: how soon a stop takes effect, on the executing replica and on another one.

Two `chatbot serve` replicas share a database; the offline model streams a long answer
slowly. For each of N runs started on replica A, once its first token has arrived the
script sends `POST …/cancel` to A (same) or B (other), and prints, per case, p50 / max of:
- cancel → 202: the endpoint's own time (it answers once the thread is free);
- cancel → `error` on A's stream: when the user sees the stop;
- cancel → next run accepted: a follow-up run sent right after the 202 is accepted (or not).

    python -m bench.cancel                 # 30 runs per case
    python -m bench.cancel --runs 100

It also prints what cancellation costs when nobody cancels: the Postgres sessions of one
replica (the cancel listener is one of them) and the statements a run issues are unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import time
from contextlib import AsyncExitStack

import httpx
import psycopg
from pydantic import SecretStr

from bench._pg import bench_database
from bench.runs import server
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.ids import TenantId, UserId

QUESTION = "What does travel insurance cover for medical costs abroad? Tell me everything."


async def one(http: httpx.AsyncClient, a: str, canceller: str, thread: str, token: str) -> tuple[float, float, bool]:
    headers = {"Authorization": f"Bearer {token}"}
    body = {"message": {"content": QUESTION}}
    async with http.stream("POST", f"{a}/v1/threads/{thread}/runs", json=body, headers=headers) as run:
        run_id = None
        lines = run.aiter_lines()
        async for line in lines:
            if line.startswith("data: ") and run_id is None:
                run_id = json.loads(line[6:])["run_id"]
            if line == "event: token":
                break
        started = time.perf_counter()
        answer = await http.post(f"{canceller}/v1/threads/{thread}/runs/{run_id}/cancel", headers=headers)
        accepted_at = time.perf_counter() - started
        follow = asyncio.create_task(http.post(f"{canceller}/v1/threads/{thread}/runs", json=body,
                                               headers={**headers, "Accept": "application/json"}))  # fmt: skip
        async for line in lines:
            if line == "event: error":
                break
        seen_at = time.perf_counter() - started
        followed = await follow
    assert answer.status_code == 202, answer.text
    return accepted_at, seen_at, followed.status_code == 200


async def main(runs: int) -> None:
    secret = secrets.token_urlsafe(32)
    settings = Settings(service_secret=SecretStr(secret), environment="test")
    token = mint_token(settings, tenant=TenantId("acme"), user=UserId("bench"), locale="en-US", ttl=3600)
    async with bench_database("cancel") as url, AsyncExitStack() as stack:
        a = await stack.enter_async_context(server(url, secret, CHATBOT_OFFLINE_TOKEN_DELAY_MS="50"))
        b = await stack.enter_async_context(server(url, secret, CHATBOT_OFFLINE_TOKEN_DELAY_MS="50"))
        async with httpx.AsyncClient(timeout=60) as http:
            for case, canceller in (("same replica", a), ("other replica", b)):
                figures = [await one(http, a, canceller, f"c-{case[0]}-{i}", token) for i in range(runs)]
                accepted = [f[0] * 1000 for f in figures]
                seen = [f[1] * 1000 for f in figures]
                followed = sum(f[2] for f in figures)
                print(
                    f"{case:>13}: cancel -> 202 p50 {statistics.median(accepted):.1f} ms, max {max(accepted):.1f} ms; "
                    f"cancel -> error event p50 {statistics.median(seen):.1f} ms, max {max(seen):.1f} ms; "
                    f"next run accepted {followed}/{runs}"
                )
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "select application_name, count(*) from pg_stat_activity "
                "where datname = current_database() and application_name like 'chatbot-%%' group by 1 order by 1"
            ).fetchall()
        print("sessions by name at the end (both replicas):", ", ".join(f"{n} x{c}" for n, c in rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    asyncio.run(main(parser.parse_args().runs))
