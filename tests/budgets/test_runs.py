"""Budgets on the run path: two replicas, the provider wire double reporting usage per call.

A budget admits what it can afford: a run holds a small share before its stream starts and
its call is sized at the model step to the window it counted plus the output that fits (the
provider's `max_tokens` lowered to it). A budget that fits N runs' actual spend admits at
least 0.9 N of them one after another, and never spends past its limit, however many run at
once on how many replicas. A sampler reads the budget all along.

`BUDGET_RUNS` (default 30) is N: the budget fits N runs' spend; N + 10 runs are sent.
`BUDGET_CONCURRENT` (default 40) runs are sent at once in the concurrency test.
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
from chatbot.ids import TenantId, UserId
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
RUNS = int(os.environ.get("BUDGET_RUNS", "30"))
CONCURRENT = int(os.environ.get("BUDGET_CONCURRENT", "40"))


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
    """Return the most tokens an answer call may cost: the window's bound plus the output cap."""
    return services.budgets.answer_input_bound + services.budgets.output_cap


async def budget_rows(services: Services, now: datetime, tenant: str = "acme") -> list[BudgetReport]:
    return await report(services.pool, TenantId(tenant), now)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")


async def _one_runs_spend(client: httpx.AsyncClient, clock: Clock) -> int:
    """Return what one run spends, measured on a user of the tenant under a budget of their own that never refuses.

    The same tenant (its knowledge, its window) as the runs measured after it, and a user's
    second run (a user's first window is a little shorter); the tenant's own counter starts
    only with the tenant budget set afterwards.
    """
    services = services_of(client)
    await set_budget(
        services.pool, BudgetTarget(TenantId("acme"), "user", UserId("probe")), "day", "tokens", Decimal(10**9)
    )
    spent = []
    for thread in ("probe-1", "probe-2"):
        response = await send_message(client, thread, QUESTION, user="probe", locale="en-US")
        assert parse_sse(response.text)[-1][0] == "end"
        await services.memory.drain(10)  # the run's memory work, if any, is part of what it spends
        [row] = await report(services.pool, TenantId("acme"), clock(), user_id=UserId("probe"))
        spent.append(int(row["spent"]))
    return spent[1] - spent[0]


def _answered(response: httpx.Response) -> bool:
    return response.status_code == 200 and parse_sse(response.text)[-1][0] == "end"


@pytest.mark.parametrize("usage", ["reported", "from_lengths"])
async def test_a_budget_that_fits_n_runs_admits_at_least_nine_tenths_of_them_one_after_another(
    isolated_database_url: str, double: ProviderDouble, usage: str
) -> None:
    # "reported": the double bills a fixed usage; "from_lengths": as much as the prompt and
    # the answer are long (about 4 characters a token), as a provider would.
    double.default = Behaviour(usage=(300, 60, 0)) if usage == "reported" else Behaviour()
    clock = Clock(NOON)
    async with replicas(isolated_database_url, double, 2, clock) as (a, b):
        services = services_of(a)
        spend = await _one_runs_spend(a, clock)
        limit = RUNS * spend
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(limit))
        outcomes = []
        for i in range(RUNS + 10):
            response = await send_message((a, b)[i % 2], f"seq-{i}", QUESTION, locale="en-US")
            outcomes.append("answered" if _answered(response) else str(response.status_code))
        row = next(r for r in await budget_rows(services, clock()) if r["scope"] == "tenant")
    answered = outcomes.count("answered")
    assert answered >= 0.9 * RUNS, (spend, outcomes)
    assert row["spent"] <= limit and row["reserved"] == 0
    assert outcomes[-1] == "429"  # once it is spent, a run is refused before its stream
    # The calls near the end were sent with the output that was left, not the whole cap.
    caps = [r.body.get("max_completion_tokens") for r in double.requests]
    assert caps[0] == services.budgets.output_cap and min(c for c in caps if c) < services.budgets.output_cap


async def test_concurrent_runs_on_two_replicas_never_overspend_and_admit_a_fair_share(
    isolated_database_url: str, double: ProviderDouble
) -> None:
    double.default = Behaviour(usage=(300, 60, 0))
    clock = Clock(NOON)
    async with replicas(isolated_database_url, double, 2, clock) as (a, b):
        services = services_of(a)
        spend = await _one_runs_spend(a, clock)
        limit = RUNS * spend
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(limit))
        await set_budget(
            services.pool, BudgetTarget(TenantId("acme"), "each_user"), "day", "tokens", Decimal(limit // 4)
        )
        highest = 0.0
        sampling = True

        async def sample() -> None:
            nonlocal highest
            while sampling:  # not polling: a sampler of spent plus reserved, every 10 ms
                for row in await budget_rows(services, clock()):
                    highest = max(highest, row["spent"] + row["reserved"])
                await asyncio.sleep(0.01)  # not polling: the sampler's period

        sampler = asyncio.create_task(sample())
        responses = await asyncio.gather(
            *(
                send_message((a, b)[i % 2], f"burst-{i}", QUESTION, user=f"u{i % 8}", locale="en-US")
                for i in range(CONCURRENT)
            )
        )
        sampling = False
        await sampler
        rows = await budget_rows(services, clock())
    answered = [r for r in responses if _answered(r)]
    refused = [r for r in responses if r.status_code == 429]
    tenant = next(r for r in rows if r["scope"] == "tenant")
    assert 0 < highest <= limit and tenant["spent"] <= limit
    assert all(r["spent"] <= r["limit"] and r["reserved"] == 0 for r in rows)
    for response in refused:
        body = response.json()
        assert body["reason"] == "budget_exhausted" and body["budget"]["period"] == "day"
        assert response.headers["Retry-After"] == str(12 * 3600)
    # Every run was answered or told why not: refused before its stream, or (its window no
    # longer fitting once counted) an error event naming the budget.
    for response in responses:
        if response.status_code == 200 and not _answered(response):
            assert parse_sse(response.text)[-1][1]["reason"] == "budget_exhausted"
    # A fair share: at least a quarter of the runs the budget pays for got their answer at
    # once (a worst case held per call let 1 through); how many more depends on how many are
    # in flight at the same instant (bench/budgets.py: 19 of 30 on an idle machine).
    assert len(answered) >= RUNS // 4, [r.status_code for r in responses]


async def test_a_user_budget_refuses_that_user_only_until_the_day_rolls_over(
    isolated_database_url: str, double: ProviderDouble
) -> None:
    clock = Clock(datetime(2026, 12, 5, 23, 59, 30, tzinfo=UTC))
    async with replicas(isolated_database_url, double, 2, clock) as (a, b):
        services = services_of(a)
        # The first run's 1200 fit; what is left then (100) fits no window.
        await set_budget(
            services.pool, BudgetTarget(TenantId("acme"), "user", UserId("heavy")), "day", "tokens", Decimal(1300)
        )
        first = await send_message(a, "heavy-1", QUESTION, user="heavy", locale="en-US")
        assert first.status_code == 200 and parse_sse(first.text)[-1][0] == "end"
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
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(10**9))
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


async def test_a_killed_replicas_hold_is_released_and_swept_without_anyone_reading_the_budget(
    migrated_database_url: str, double: ProviderDouble
) -> None:
    env = {
        "CHATBOT_MODEL": "openai:gpt-4o-mini",
        "CHATBOT_MODEL_BASE_URL": double.openai_base_url,
        "OPENAI_API_KEY": "test-key",
        "CHATBOT_BUDGET_RESERVATION_SECONDS": "3",
        "CHATBOT_BUDGET_SWEEP_SECONDS": "0.5",
    }
    doomed = start_replica(migrated_database_url, **env)
    try:
        async with running_app(
            migrated_database_url,
            model="openai:gpt-4o-mini",
            model_base_url=double.openai_base_url,
            budget_sweep_seconds=0.5,
        ) as survivor:
            services = services_of(survivor)
            target = BudgetTarget(TenantId("killed"), "tenant")
            await set_budget(services.pool, target, "day", "tokens", Decimal(3000))
            double.hold()
            async with httpx.AsyncClient(timeout=30) as http:
                body = {"message": {"content": QUESTION}}
                headers = auth(tenant="killed", locale="en-US")
                async with http.stream(
                    "POST", f"{doomed.base_url}{runs_path('doomed')}", json=body, headers=headers
                ) as held:
                    assert held.status_code == 200
                    await double.async_wait_for(lambda d: len(d.requests) == 1, timeout=30)
                    doomed.kill(signal.SIGKILL)  # mid-call: its hold is never settled nor renewed
            double.release()
            refused = await send_message(survivor, "after-kill", QUESTION, tenant="killed", locale="en-US")
            assert refused.status_code == 429  # the dead replica's hold still counts
            # Within its 3 s expiry and the survivor's sweep, nobody reading the budget: the
            # row is deleted by the replicas, not by `budget show`.
            await wait_until(lambda: _none_held(services, "killed"), what="the hold swept", timeout=30)
            accepted = await send_message(survivor, "after-sweep", QUESTION, tenant="killed", locale="en-US")
            assert accepted.status_code == 200 and parse_sse(accepted.text)[-1][0] == "end"
    finally:
        doomed.kill(signal.SIGTERM)


async def test_a_live_calls_hold_is_renewed_past_its_expiry(isolated_database_url: str, double: ProviderDouble) -> None:
    async with running_app(
        isolated_database_url,
        model="openai:gpt-4o-mini",
        model_base_url=double.openai_base_url,
        budget_reservation_seconds=1.5,
        budget_sweep_seconds=0.5,
    ) as client:
        services = services_of(client)
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(3000))
        double.hold()
        slow = asyncio.create_task(send_message(client, "slow", QUESTION, locale="en-US"))
        await double.async_wait_for(lambda d: len(d.requests) == 1, timeout=30)
        held_since = datetime.now(UTC)
        await wait_until(lambda: _later(held_since, 4.5), what="three expiry periods of the call in flight", timeout=10)
        assert await _held_rows(services, "acme") == 1  # renewed: neither expired nor swept
        refused = await send_message(client, "beside", QUESTION, locale="en-US")
        assert refused.status_code == 429
        double.release()
        assert _answered(await slow)
        [row] = await budget_rows(services, datetime.now(UTC))
        assert row["reserved"] == 0 and row["spent"] == sum(USAGE[:2])


async def _later(moment: datetime, seconds: float) -> bool:
    return (datetime.now(UTC) - moment).total_seconds() > seconds


async def _none_held(services: Services, tenant: str) -> bool:
    return await _held_rows(services, tenant) == 0


async def _held_rows(services: Services, tenant: str) -> int:
    async with services.pool.connection() as conn:
        cur = await conn.execute("select count(*) as n from budget_reservations where tenant_id = %s", (tenant,))
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_the_chain_falls_back_under_a_budget_and_a_budget_too_small_asks_no_entry(
    isolated_database_url: str, double: ProviderDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    chain: dict[str, Any] = {
        "model": "openai:gpt-4o-mini,anthropic:claude-haiku-4-5",
        "model_base_urls": f"{double.openai_base_url},{double.anthropic_base_url}",
    }
    async with running_app(isolated_database_url, **chain) as client:
        services = services_of(client)
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "month", "tokens", Decimal(200))
        refused = await send_message(client, "chain", QUESTION, locale="en-US")
        assert refused.status_code == 429
        assert refused.json()["budget"] == {"scope": "tenant", "period": "month"}
        assert double.requests == []  # neither entry was asked
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "month", "tokens", Decimal(10**6))
        double.script("gpt-4o-mini", Behaviour(http_status=503))
        answered = await send_message(client, "chain", QUESTION, locale="en-US")
        assert parse_sse(answered.text)[-1][0] == "end"
        assert [r.provider for r in double.requests] == ["openai", "anthropic"]  # fell back on the 503
        [row] = await budget_rows(services, datetime.now(UTC))
        assert row["reserved"] == 0 and 0 < row["spent"] <= 2 * worst_case(services)


async def test_a_model_without_a_price_is_refused_by_name_under_a_currency_budget(
    isolated_database_url: str, double: ProviderDouble
) -> None:
    async with replicas(isolated_database_url, double, 1, Clock(NOON)) as (client,):
        services = services_of(client)
        assert "openai:gpt-4o-mini" not in services.budgets.prices  # CHATBOT_MODEL_PRICES does not price it
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "usd", Decimal("0.000001"))
        for thread in ("unpriced-1", "unpriced-2"):
            refused = await send_message(client, thread, QUESTION, locale="en-US")
            assert refused.status_code == 429, refused.text
            body = refused.json()
            assert body["reason"] == "model_unpriced" and body["budget"] == {"scope": "tenant", "period": "day"}
            assert "no price" in body["detail"] and refused.headers["Retry-After"] == str(12 * 3600)
        assert double.requests == []  # nothing was sent uncounted
        # A tokens budget counts an unpriced model's tokens: it answers.
        await set_budget(services.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(10**6))
        assert _answered(await send_message(client, "unpriced-3", QUESTION, locale="en-US"))


async def test_a_run_whose_counted_window_no_longer_fits_ends_with_a_named_error_and_sends_nothing(
    kb_database_url: str, double: ProviderDouble
) -> None:
    from chatbot.agent.modelcall import answer_input_floor

    async with running_app(kb_database_url, model="openai:gpt-4o-mini", model_base_url=double.openai_base_url) as c:
        services = services_of(c)
        # Room for the prompt, the question and the output floor (the early hold of a user's
        # first run), not for the knowledge chunks the window adds once it is built.
        floor = answer_input_floor("openai:gpt-4o-mini", QUESTION, "en", services.settings.context_tokens)
        room = floor + services.budgets.output_floor + 10
        await set_budget(
            services.pool, BudgetTarget(TenantId("acme"), "user", UserId("tight")), "day", "tokens", Decimal(room)
        )
        response = await send_message(c, "tight", QUESTION, user="tight", locale="en-US")
        assert response.status_code == 200  # admitted at its start
        name, problem = parse_sse(response.text)[-1]
        assert name == "error" and (problem["reason"], problem["status"]) == ("budget_exhausted", 429)
        assert double.requests == []  # the call was never sent
        [row] = await report(services.pool, TenantId("acme"), datetime.now(UTC), user_id=UserId("tight"))
        assert (row["spent"], row["reserved"]) == (0, 0)
        # Not a stuck thread: the next run is refused at its start, before its stream, now
        # that this caller's window is known.
        again = await send_message(c, "tight", QUESTION, user="tight", locale="en-US")
        assert again.status_code == 429 and again.json()["reason"] == "budget_exhausted"
