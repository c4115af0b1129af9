"""Budgets on the run path: two replicas, the provider wire double with a fixed usage per call.

Runs are started at once against a tenant budget that fits a known number of answer calls'
worst cases; the double holds every response, so the requests it counts are exactly the
calls the budget let through, and no settlement frees room before every run was decided.
A sampler reads the budget all along: spend plus reservations never passes it.

`BUDGET_RUNS` (default 200), `BUDGET_USERS` (20) and `BUDGET_FITS` (50) size the concurrency
test (about 4 s on two cores as it is).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest

from chatbot.budgets.admin import BudgetReport, BudgetTarget, report, set_budget
from chatbot.ids import TenantId
from chatbot.services import Services
from tests.fixtures.app import running_app, services_of, start_replica
from tests.fixtures.messages import runs_path, send_message
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.sse import parse_sse
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

QUESTION = "What does travel insurance cover?"  # not worth a memory extraction call
USAGE = (1000, 200, 0)  # what the double reports for every call: 1200 tokens spent
NOON = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
RUNS = int(os.environ.get("BUDGET_RUNS", "200"))
USERS = int(os.environ.get("BUDGET_USERS", "20"))
FITS = int(os.environ.get("BUDGET_FITS", "50"))


@pytest.fixture
def double() -> Iterator[ProviderDouble]:
    with ProviderDouble() as d:
        d.default = Behaviour(usage=USAGE)
        yield d


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@asynccontextmanager
async def replicas(
    url: str, double: ProviderDouble, count: int, clock: Clock
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """In-process replicas on one database, answering through the double, on the test's clock."""
    settings: dict[str, Any] = {"model": "openai:gpt-4o-mini", "model_base_url": double.openai_base_url}
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(running_app(url, **settings)) for _ in range(count)]
        for client in clients:
            services_of(client).budgets.clock = clock
        yield clients


def worst_case(services: Services) -> int:
    """Return the tokens an answer call reserves: the window's bound plus the output cap."""
    return services.budgets.answer_input_bound + services.budgets.output_cap


async def budget_rows(services: Services, now: datetime) -> list[BudgetReport]:
    return await report(services.pool, TenantId("acme"), now)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")


async def test_concurrent_runs_make_exactly_the_calls_the_tenant_budget_fits(
    isolated_database_url: str, double: ProviderDouble
) -> None:
    clock = Clock(NOON)
    async with replicas(isolated_database_url, double, 2, clock) as (a, b):
        services = services_of(a)
        worst = worst_case(services)
        limit = FITS * worst + worst // 2  # room for FITS worst cases, not one more
        await set_budget(services.pool, BudgetTarget("acme", "tenant"), "day", "tokens", Decimal(limit))
        highest = 0.0
        sampling = True

        async def sample() -> None:
            nonlocal highest
            while sampling:  # not polling: a sampler of spent plus reserved, every 10 ms
                for row in await budget_rows(services, clock()):
                    highest = max(highest, row["spent"] + row["reserved"])
                await asyncio.sleep(0.01)  # not polling: the sampler's period

        sampler = asyncio.create_task(sample())
        double.hold()
        refused: list[httpx.Response] = []

        async def run(i: int) -> httpx.Response:
            client = (a, b)[i % 2]
            response = await send_message(client, f"burst-{i}", QUESTION, user=f"u{i % USERS}", locale="en-US")
            if response.status_code == 429:
                refused.append(response)
            return response

        tasks = [asyncio.create_task(run(i)) for i in range(RUNS)]
        # Every run decided while no call has ended: the double holds what was let through.
        await wait_until(lambda: len(refused) + len(double.requests) >= RUNS, what="every run decided", timeout=120)
        assert len(double.requests) == FITS
        [row] = await budget_rows(services, clock())
        assert (row["spent"], row["reserved"]) == (0, FITS * worst)
        double.release()
        responses = await asyncio.gather(*tasks)
        sampling = False
        await sampler
    answered = [r for r in responses if r.status_code == 200]
    assert len(answered) == FITS and len(refused) == RUNS - FITS
    assert all(parse_sse(r.text)[-1][0] == "end" for r in answered)
    assert len(double.requests) == FITS  # no call was made after the refusals
    for response in refused:
        body = response.json()
        assert body["reason"] == "budget_exhausted" and body["budget"] == {"scope": "tenant", "period": "day"}
        assert response.headers["Retry-After"] == str(12 * 3600)
    assert 0 < highest <= limit
    async with running_app(isolated_database_url) as c:
        [row] = await budget_rows(services_of(c), clock())
    assert (row["spent"], row["reserved"]) == (FITS * sum(USAGE[:2]), 0)


async def test_a_user_budget_refuses_that_user_only_until_the_day_rolls_over(
    isolated_database_url: str, double: ProviderDouble
) -> None:
    clock = Clock(datetime(2026, 12, 5, 23, 59, 30, tzinfo=UTC))
    async with replicas(isolated_database_url, double, 2, clock) as (a, b):
        services = services_of(a)
        worst = worst_case(services)
        await set_budget(services.pool, BudgetTarget("acme", "user", "heavy"), "day", "tokens", Decimal(worst + 1000))
        first = await send_message(a, "heavy-1", QUESTION, user="heavy", locale="en-US")
        assert first.status_code == 200 and parse_sse(first.text)[-1][0] == "end"
        # 1200 spent: another worst case does not fit the rest of the day.
        second = await send_message(b, "heavy-2", QUESTION, user="heavy", locale="en-US")
        assert second.status_code == 429, second.text
        assert second.json()["budget"] == {"scope": "user", "period": "day"}
        assert second.headers["Retry-After"] == "30"
        other = await send_message(b, "light-1", QUESTION, user="light", locale="en-US")
        assert other.status_code == 200  # another user of the tenant is not refused
        # A refused first run leaves nothing behind: its thread does not exist.
        missing = await a.get("/v1/threads/heavy-2/messages", headers=auth(user="heavy"))
        assert missing.status_code == 404
        clock.now = datetime(2026, 12, 6, 0, 0, tzinfo=UTC)  # UTC midnight: a new day's budget
        again = await send_message(b, "heavy-2", QUESTION, user="heavy", locale="en-US")
        assert again.status_code == 200, again.text
    assert len(double.requests) == 3


async def test_a_failed_call_releases_and_a_cancelled_one_settles_to_what_was_streamed(
    isolated_database_url: str, double: ProviderDouble
) -> None:
    clock = Clock(NOON)
    async with replicas(isolated_database_url, double, 1, clock) as (a,):
        services = services_of(a)
        await set_budget(services.pool, BudgetTarget("acme", "tenant"), "day", "tokens", Decimal(10**9))
        double.script(Behaviour(http_status=500), Behaviour(http_status=500))  # the client retries once
        failed = await send_message(a, "fails", QUESTION, locale="en-US")
        assert parse_sse(failed.text)[-1][0] == "error"
        [row] = await budget_rows(services, clock())
        assert (row["spent"], row["reserved"]) == (0, 0)  # released: the provider billed nothing
        long = "Travel insurance covers medical costs abroad up to your limit. " * 40
        double.script(Behaviour(answer=long, piece_delay=0.02))
        streamed = asyncio.create_task(send_message(a, "cancelled", QUESTION, locale="en-US"))
        await double.async_wait_for(lambda d: bool(d.requests) and d.pieces_sent[-1] >= 20, timeout=30)
        stream = next(iter(services.runs._runs.values()))  # the one run in flight on this replica
        cancel = await a.post(f"{runs_path('cancelled')}/{stream.run_id}/cancel", headers=auth())
        assert cancel.status_code == 202
        events = parse_sse((await streamed).text)
        shown = "".join(e[1].get("content", "") for e in events if e[0] == "token")
        assert events[-1][1]["reason"] == "cancelled" and shown
        [row] = await budget_rows(services, clock())
        assert row["reserved"] == 0
        from chatbot.agent._tokens import token_counter_for

        streamed_tokens = token_counter_for("openai:gpt-4o-mini").count_text(shown)
        # The window it sent plus what was streamed: less than a whole answer, more than the text.
        assert streamed_tokens < row["spent"] < worst_case(services)


async def test_a_killed_replicas_reservation_is_released_within_its_expiry(
    migrated_database_url: str, double: ProviderDouble
) -> None:
    env = {
        "CHATBOT_MODEL": "openai:gpt-4o-mini",
        "CHATBOT_MODEL_BASE_URL": double.openai_base_url,
        "OPENAI_API_KEY": "test-key",
        "CHATBOT_BUDGET_RESERVATION_SECONDS": "3",
    }
    doomed = start_replica(migrated_database_url, **env)
    try:
        async with running_app(
            migrated_database_url, model="openai:gpt-4o-mini", model_base_url=double.openai_base_url
        ) as survivor:
            services = services_of(survivor)
            worst = worst_case(services)
            target = BudgetTarget("killed", "tenant")
            await set_budget(services.pool, target, "day", "tokens", Decimal(worst + worst // 2))
            double.hold()
            async with httpx.AsyncClient(timeout=30) as http:
                body = {"message": {"content": QUESTION}}
                headers = auth(tenant="killed", locale="en-US")
                async with http.stream(
                    "POST", f"{doomed.base_url}{runs_path('doomed')}", json=body, headers=headers
                ) as held:
                    assert held.status_code == 200
                    await double.async_wait_for(lambda d: len(d.requests) == 1, timeout=30)
                    doomed.kill(signal.SIGKILL)  # mid-call: its reservation is never settled
            double.release()
            refused = await send_message(survivor, "after-kill", QUESTION, tenant="killed", locale="en-US")
            assert refused.status_code == 429  # the dead replica's worst case still counts
            # Its 3 s expiry passes: the worst case stops counting and a run fits again.
            accepted = await wait_until(
                lambda: _accepted(survivor), what="the reservation to expire", timeout=10, interval=0.25
            )
            assert accepted is not None and accepted.status_code == 200
    finally:
        doomed.kill(signal.SIGTERM)


async def _accepted(client: httpx.AsyncClient) -> httpx.Response | None:
    response = await send_message(client, f"after-kill-{id(client)}", QUESTION, tenant="killed", locale="en-US")
    return response if response.status_code == 200 else None


async def test_a_budget_refusal_is_not_a_model_failure_the_chain_falls_back_on(
    isolated_database_url: str, double: ProviderDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    chain: dict[str, Any] = {
        "model": "openai:gpt-4o-mini,anthropic:claude-haiku-4-5",
        "model_base_urls": f"{double.openai_base_url},{double.anthropic_base_url}",
    }
    async with running_app(isolated_database_url, **chain) as client:
        services = services_of(client)
        # Room for one entry's worst case, not for the chain's (each entry may be billed).
        one_entry = services.budgets.answer_input_bound + services.budgets.output_cap
        await set_budget(services.pool, BudgetTarget("acme", "tenant"), "month", "tokens", Decimal(one_entry))
        refused = await send_message(client, "chain", QUESTION, locale="en-US")
        assert refused.status_code == 429
        assert refused.json()["budget"] == {"scope": "tenant", "period": "month"}
        assert double.requests == []  # neither entry was asked
        await set_budget(services.pool, BudgetTarget("acme", "tenant"), "month", "tokens", Decimal(2 * one_entry))
        double.script("gpt-4o-mini", Behaviour(http_status=503))
        answered = await send_message(client, "chain", QUESTION, locale="en-US")
        assert parse_sse(answered.text)[-1][0] == "end"
        assert [r.provider for r in double.requests] == ["openai", "anthropic"]  # fell back on the 503
        [row] = await budget_rows(services, datetime.now(UTC))
        assert row["reserved"] == 0 and 0 < row["spent"] <= 2 * one_entry
