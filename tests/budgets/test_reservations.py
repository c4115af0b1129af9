"""Budgets against a real Postgres: reserve a call's worst case, settle it, release it, expire it, roll over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from chatbot.budgets.admin import BudgetTarget, clear_budgets, forget_user, report, set_budget
from chatbot.budgets.service import BudgetExhausted, Budgets, ModelUnpriced, Reservation
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, UserId
from chatbot.models.prices import Price
from chatbot.responses import ModelCallUsage

MODEL = "openai:gpt-4o-mini"
# Worst case of every call below: 900 input + 100 output = 1000 tokens.
INPUT, CAP = 900, 100


class Clock:
    """A clock the test moves: the budgets' "now"."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def budgets(isolated_database_url: str) -> AsyncIterator[tuple[Budgets, Clock]]:
    from chatbot.db.pool import open_pool
    from tests.fixtures.postgres import settings_for

    clock = Clock(datetime(2026, 12, 5, 12, 0, tzinfo=UTC))
    async with open_pool(settings_for(isolated_database_url), max_size=8) as pool:
        prices = {MODEL: Price(input=1.0, output=10.0, cached_input=0.5)}
        b = Budgets(pool, prices=prices, output_cap=CAP, reservation_seconds=60, clock=clock, output_floor=20)
        yield b, clock
        await b.close()


async def _reserve(b: Budgets, user: str = "u1", tenant: str = "acme") -> object:
    return await b.reserve(TenantId(tenant), UserId(user), kind="answer", models=[MODEL], input_tokens=INPUT)


async def _left(pool: Pool, now: datetime, tenant: str = "acme") -> list[tuple[str, str | None, float, float]]:
    return [(r["scope"], r["user_id"], r["spent"], r["reserved"]) for r in await report(pool, TenantId(tenant), now)]


async def test_without_a_budget_nothing_is_reserved_or_refused(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    assert await _reserve(b) is None
    await set_budget(b.pool, BudgetTarget(TenantId("globex"), "tenant"), "day", "tokens", Decimal(10))
    assert await _reserve(b) is None  # another tenant's budget does not apply
    assert await report(b.pool, TenantId("acme"), clock()) == []


async def test_a_tenant_budget_takes_exactly_the_worst_cases_that_fit(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(3500))
    held = [await _reserve(b, user=f"u{i}") for i in range(3)]
    assert all(h is not None for h in held)
    with pytest.raises(BudgetExhausted) as refused:
        await _reserve(b, user="u9")
    assert (refused.value.scope, refused.value.period) == ("tenant", "day")
    assert refused.value.retry_after == 12 * 3600  # noon to UTC midnight
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 3000)]
    # Settled to what the call used (200 + 50): the rest of its worst case is free again.
    await b.settle(held[0], [ModelCallUsage(kind="answer", model=MODEL, input_tokens=200, output_tokens=50)])  # type: ignore[arg-type]
    assert await _left(b.pool, clock()) == [("tenant", None, 250, 2000)]
    assert await _reserve(b) is not None  # 250 + 2000 + 1000 <= 3500
    with pytest.raises(BudgetExhausted):
        await _reserve(b)


async def test_a_failed_call_releases_its_reservation(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "month", "tokens", Decimal(1000))
    first = await _reserve(b)
    with pytest.raises(BudgetExhausted) as refused:
        await _reserve(b)
    assert refused.value.period == "month"
    assert refused.value.retry_after == (datetime(2027, 1, 1, tzinfo=UTC) - clock()).total_seconds()
    await b.release(first)  # type: ignore[arg-type]
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 0)]
    assert await _reserve(b) is not None


async def test_a_user_budget_refuses_that_user_only(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(100_000))
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "user", UserId("heavy")), "day", "tokens", Decimal(1500))
    assert await _reserve(b, user="heavy") is not None
    with pytest.raises(BudgetExhausted) as refused:
        await _reserve(b, user="heavy")
    assert (refused.value.scope, refused.value.period) == ("user", "day")
    for _ in range(3):
        assert await _reserve(b, user="light") is not None
    rows = await _left(b.pool, clock())
    assert ("tenant", None, 0, 4000) in rows and ("user", "heavy", 0, 1000) in rows


async def test_each_user_is_a_default_a_personal_budget_overrides(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "each_user"), "day", "tokens", Decimal(1000))
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "user", UserId("vip")), "day", "tokens", Decimal(5000))
    for user in ("a", "b"):
        assert await _reserve(b, user=user) is not None
        with pytest.raises(BudgetExhausted) as refused:
            await _reserve(b, user=user)
        assert refused.value.scope == "user"
    for _ in range(5):
        assert await _reserve(b, user="vip") is not None
    rows = await report(b.pool, TenantId("acme"), clock())
    defaults = sorted(r["user_id"] or "" for r in rows if r["default"])
    assert defaults == ["a", "b"]
    assert await clear_budgets(b.pool, BudgetTarget(TenantId("acme"), "each_user"), None) == 1
    assert await _reserve(b, user="a") is None  # no budget applies to "a" any more


async def test_a_usd_budget_prices_the_worst_case_at_the_model_price(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    # 900 input at $1/M + 100 output at $10/M = $0.0019 a call: two fit in $0.004.
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "usd", Decimal("0.004"))
    first = await _reserve(b)
    assert await _reserve(b) is not None
    with pytest.raises(BudgetExhausted):
        await _reserve(b)
    await b.settle(first, [ModelCallUsage(kind="answer", model=MODEL, input_tokens=100, output_tokens=10)])  # type: ignore[arg-type]
    [row] = await report(b.pool, TenantId("acme"), clock())
    assert row["spent"] == pytest.approx((100 * 1 + 10 * 10) / 1e6)
    assert row["reserved"] == pytest.approx(0.0019)


async def test_a_reservation_its_replica_never_settled_stops_counting_when_it_expires(
    budgets: tuple[Budgets, Clock],
) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(1000))
    assert await _reserve(b) is not None  # its replica dies: never settled
    with pytest.raises(BudgetExhausted):
        await _reserve(b)
    clock.now += timedelta(seconds=61)  # past the reservation's 60 s
    assert await _reserve(b) is not None
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 1000)]


async def test_day_and_month_roll_over_at_utc_midnight(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    clock.now = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(1000))
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "user", UserId("u1")), "month", "tokens", Decimal(2000))
    held = await _reserve(b)
    await b.settle(held, [ModelCallUsage(kind="answer", model=MODEL, input_tokens=900, output_tokens=100)])  # type: ignore[arg-type]
    with pytest.raises(BudgetExhausted) as refused:
        await _reserve(b)
    assert (refused.value.period, refused.value.retry_after) == ("day", 1)
    clock.now = datetime(2027, 1, 1, 0, 0, tzinfo=UTC)  # a new day and a new month
    held = await _reserve(b)
    await b.settle(held, [ModelCallUsage(kind="answer", model=MODEL, input_tokens=900, output_tokens=100)])  # type: ignore[arg-type]
    clock.now = datetime(2027, 1, 2, 0, 0, tzinfo=UTC)  # a new day, the same month
    held = await _reserve(b)
    await b.settle(held, [ModelCallUsage(kind="answer", model=MODEL, input_tokens=900, output_tokens=100)])  # type: ignore[arg-type]
    clock.now = datetime(2027, 1, 3, 0, 0, tzinfo=UTC)
    with pytest.raises(BudgetExhausted) as refused:
        await _reserve(b)
    assert (refused.value.scope, refused.value.period) == ("user", "month")
    assert refused.value.retry_after == 29 * 86400


async def test_concurrent_reservations_never_pass_the_budget(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(7500))
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "each_user"), "day", "tokens", Decimal(3000))

    async def one(i: int) -> bool:
        try:
            return await _reserve(b, user=f"u{i % 4}") is not None
        except BudgetExhausted:
            return False

    results = await asyncio.gather(*(one(i) for i in range(40)))
    assert sum(results) == 7  # the tenant's 7500 takes 7 worst cases; no user holds more than 3
    rows = await report(b.pool, TenantId("acme"), clock())
    assert all(r["reserved"] <= r["limit"] for r in rows)


async def test_erasure_removes_the_users_budget_rows(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(10_000))
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "user", UserId("gone")), "day", "tokens", Decimal(5000))
    assert await _reserve(b, user="gone") is not None
    async with b.pool.connection() as conn:
        assert await forget_user(conn, TenantId("acme"), UserId("gone")) == 1
    rows = await report(b.pool, TenantId("acme"), clock())
    assert [(r["scope"], r["user_id"]) for r in rows] == [("tenant", None)]
    async with b.pool.connection() as conn:
        cur = await conn.execute(
            "select count(*) as n from budget_reservations where tenant_id = 'acme' and user_id = 'gone'"
        )
        assert (await cur.fetchone())["n"] == 0  # type: ignore[index]


async def test_an_answer_chain_reserves_one_worst_case_per_entry(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(3000))
    chain = [MODEL, "anthropic:claude-haiku-4-5"]
    # Each entry that fails before answering may be billed, then the next one is asked.
    held = await b.reserve(TenantId("acme"), UserId("u1"), kind="answer", models=chain, input_tokens=INPUT, calls=2)
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 2000)]
    with pytest.raises(BudgetExhausted):
        await b.reserve(TenantId("acme"), UserId("u1"), kind="answer", models=chain, input_tokens=INPUT, calls=2)
    # Both entries were asked: the first failed after 900 input tokens, the second answered.
    await b.settle(
        held,
        [
            ModelCallUsage(kind="answer", model=MODEL, input_tokens=900, output_tokens=0),
            ModelCallUsage(kind="answer", model=chain[1], input_tokens=900, output_tokens=100),
        ],
    )
    assert await _left(b.pool, clock()) == [("tenant", None, 1900, 0)]


async def test_a_sized_call_gets_the_output_that_fits_and_is_refused_only_below_the_floor(
    budgets: tuple[Budgets, Clock],
) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(1000))
    early = await b.admit(TenantId("acme"), UserId("u1"), [MODEL], input_floor=900)
    assert isinstance(early, Reservation)
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 920)]  # the input's floor plus the output floor
    # The window counts 300: its whole output cap fits, and the hold is resized in place.
    assert await b.size(early, model=MODEL, input_tokens=300, spent=[]) == CAP
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 400)]
    # A caller not seen yet: the windows seen lately (300), over its floor (100), plus 20.
    other = await b.admit(TenantId("acme"), UserId("u2"), [MODEL], input_floor=100)
    assert other is not None
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 720)]
    # 600 left: 560 input leaves 40 of output, shared with u1's call in flight: 20, the floor.
    assert await b.size(other, model=MODEL, input_tokens=560, spent=[]) == 20
    assert await _left(b.pool, clock()) == [("tenant", None, 0, 980)]
    await b.settle(early, [ModelCallUsage(kind="answer", model=MODEL, input_tokens=300, output_tokens=60)])
    with pytest.raises(BudgetExhausted):  # 1000 - 360 - 580 = 60 left: u2's latest window (560) does not fit
        await b.admit(TenantId("acme"), UserId("u2"), [MODEL], input_floor=10)
    with pytest.raises(BudgetExhausted):  # 700 input and the floor do not fit in 640: the hold stays as it was
        await b.size(other, model=MODEL, input_tokens=700, spent=[])
    assert await _left(b.pool, clock()) == [("tenant", None, 360, 580)]


async def test_calls_in_flight_share_the_output_room(budgets: tuple[Budgets, Clock]) -> None:
    b, clock = budgets
    b.output_cap = 1000
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(2000))
    holds = [await b.admit(TenantId("acme"), UserId(f"u{i}"), [MODEL], input_floor=80) for i in range(4)]
    assert all(h is not None for h in holds)
    # Alone, a call could take all 1000 of output; beside three holds of 100, it gets its share.
    granted = [await b.size(h, model=MODEL, input_tokens=80, spent=[]) for h in holds if h is not None]
    assert granted[0] == (2000 - 300 - 80) // 4 and all(g >= 20 for g in granted)
    [row] = await report(b.pool, TenantId("acme"), clock())
    assert row["reserved"] <= 2000


async def test_a_usd_budget_refuses_a_model_without_a_price_and_prices_the_output_it_grants(
    budgets: tuple[Budgets, Clock],
) -> None:
    b, clock = budgets
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "usd", Decimal("0.001"))
    with pytest.raises(ModelUnpriced) as refused:
        await b.admit(TenantId("acme"), UserId("u1"), ["openai:unpriced"])
    assert (refused.value.reason, refused.value.scope, refused.value.period) == ("model_unpriced", "tenant", "day")
    with pytest.raises(ModelUnpriced):  # a chain with one unpriced entry cannot be counted either
        await b.admit(TenantId("acme"), UserId("u1"), [MODEL, "openai:unpriced"])
    with pytest.raises(ModelUnpriced):
        await b.reserve(TenantId("acme"), UserId("u1"), kind="memory", models=["openai:unpriced"], input_tokens=10)
    held = await b.admit(TenantId("acme"), UserId("u1"), [MODEL])
    assert held is not None
    # $0.001 - 500 input at $1/M = $0.0005: 50 output tokens at $10/M.
    assert await b.size(held, model=MODEL, input_tokens=500, spent=[]) == 50
    [row] = await report(b.pool, TenantId("acme"), clock())
    assert row["reserved"] == pytest.approx(0.001)
    # A tokens budget counts an unpriced model's tokens: it is not refused.
    await clear_budgets(b.pool, BudgetTarget(TenantId("acme"), "tenant"), None)
    await set_budget(b.pool, BudgetTarget(TenantId("acme"), "tenant"), "month", "tokens", Decimal(5000))
    assert await b.admit(TenantId("acme"), UserId("u2"), ["openai:unpriced"]) is not None
