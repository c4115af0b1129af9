"""Erasing a user removes their budget rows: the budget, its counters, its reservations."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from chatbot.budgets.admin import BudgetTarget, report, set_budget
from chatbot.ids import TenantId, UserId
from tests.fixtures.app import running_app, services_of
from tests.fixtures.tokens import auth


async def test_erasing_a_user_removes_their_budget_rows_only(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        services = services_of(client)
        pool, budgets = services.pool, services.budgets
        await set_budget(pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(10**6))
        await set_budget(pool, BudgetTarget(TenantId("acme"), "each_user"), "day", "tokens", Decimal(10**5))
        for user in ("gone", "stays"):
            await set_budget(
                pool, BudgetTarget(TenantId("acme"), "user", UserId(user)), "month", "tokens", Decimal(10**5)
            )
            await budgets.reserve(TenantId("acme"), UserId(user), kind="answer", models=["openai:x"], input_tokens=100)
        erased = await client.delete("/v1/users/gone", headers=auth(user="gone"))
        assert erased.status_code == 200, erased.text
        rows = await report(pool, TenantId("acme"), datetime.now(UTC))
        assert sorted((r["scope"], r["user_id"], r["period"]) for r in rows) == [
            ("tenant", None, "day"),
            ("user", "stays", "day"),
            ("user", "stays", "month"),
        ]
        async with pool.connection() as conn:
            for table in ("budgets", "budget_counters", "budget_reservations"):
                cur = await conn.execute(f"select count(*) as n from {table} where user_id = 'gone'")
                assert (await cur.fetchone())["n"] == 0, table  # type: ignore[index]
        # The tenant's caps are not the user's rows: a user who comes back after erasing
        # themselves is capped by the tenant's budget and its each-user default again.
        again = await budgets.admit(TenantId("acme"), UserId("gone"), ["openai:x"], input_floor=100)
        assert again is not None
        rows = await report(pool, TenantId("acme"), datetime.now(UTC), user_id=UserId("gone"))
        assert [(r["scope"], r["user_id"], r["default"]) for r in rows] == [("user", "gone", True)]
