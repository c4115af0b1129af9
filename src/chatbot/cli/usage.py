"""`chatbot usage --since DATE [--until DATE] [--by tenant|day|model] [--format table|json]`."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, TypedDict

import typer

from chatbot.cli import common
from chatbot.cli.budget import print_budgets

if TYPE_CHECKING:
    from chatbot.budgets.admin import TenantBudgetReport
    from chatbot.db.pool import Pool
    from chatbot.db.usage_totals import Grouping
    from chatbot.models.prices import Price

_COUNTS = ("input_tokens", "output_tokens", "cached_input_tokens")


class UsageCounts(TypedDict):
    """Token counts summed over models, and their cost (the `total` of `chatbot usage`)."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float | None
    """Over each model's own price; None without prices, or when a model of the row has none."""


class UsageRow(UsageCounts):
    """One line of `chatbot usage`: a tenant, day or model (`key`, first), its counts summed over models."""

    key: str


def usage(
    since: str = typer.Option(..., "--since", help="First day (YYYY-MM-DD, UTC), inclusive."),
    until: str | None = typer.Option(None, "--until", help="Last day (YYYY-MM-DD, UTC), inclusive."),
    by: str = typer.Option("tenant", "--by", help="Group by tenant, day or model."),
    output: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """Print model tokens (and, with CHATBOT_MODEL_PRICES, their cost) from the daily totals.

    The totals outlive threads: a deleted thread's usage stays, anonymous, per tenant and day.
    Then every budget (`chatbot budget`) in its current period: limit, spent, reserved, left.
    """
    from chatbot.db import usage_totals
    from chatbot.db.pool import open_pool
    from chatbot.models.prices import PricesError, parse_prices

    grouping = _grouping(by)
    if output not in ("table", "json"):
        common.fail("--format must be table or json", 2)
    first, last = _day(since, "--since"), _day(until, "--until") if until else None
    settings = common.load_settings(environment="dev")  # needs no token key
    try:
        prices = parse_prices(settings.model_prices)
    except PricesError as exc:
        common.fail(str(exc), 2)

    async def _go() -> tuple[list[dict[str, Any]], list[TenantBudgetReport]]:
        async with open_pool(settings, max_size=1) as pool:
            async with pool.connection() as conn:
                found = await usage_totals.totals(conn, since=first, until=last, by=grouping)
            return found, await _budgets(pool)

    found, budgets = common.run(_go())
    rows = _rows(found, prices)
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    total = UsageCounts(
        input_tokens=sum(r["input_tokens"] for r in rows),
        output_tokens=sum(r["output_tokens"] for r in rows),
        cached_input_tokens=sum(r["cached_input_tokens"] for r in rows),
        cost_usd=None if not prices else round(sum(costs), 6),
    )
    if output == "json":
        typer.echo(json.dumps({"rows": rows, "total": total, "budgets": budgets}, ensure_ascii=False))
        return
    _table(rows, total, by)
    if budgets:
        print_budgets(budgets, title="budgets (current UTC day and month)")


async def _budgets(pool: Pool) -> list[TenantBudgetReport]:
    """Return every tenant's budgets in their current periods, each row naming its tenant."""
    from chatbot.budgets.admin import of_tenant, report, tenants_with_budgets

    now = datetime.now(UTC)
    rows: list[TenantBudgetReport] = []
    for tenant in await tenants_with_budgets(pool):
        rows.extend(of_tenant(tenant, row) for row in await report(pool, tenant, now))
    return rows


def _grouping(by: str) -> Grouping:
    """Return `--by` as the grouping it names; exit 2 naming the choices when it names none."""
    match by:
        case "tenant" | "day" | "model":
            return by
    common.fail("--by must be tenant, day or model", 2)


def _day(value: str, option: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        common.fail(f"{option} must be a date, YYYY-MM-DD", 2)
        raise  # unreachable: fail exits


def _rows(found: list[dict[str, Any]], prices: dict[str, Price]) -> list[UsageRow]:
    """Return one row per key: counts summed over models, cost over each model's own price."""
    rows: dict[str, UsageRow] = {}
    for item in found:
        key = str(item["key"])
        row = rows.setdefault(
            key, UsageRow(key=key, input_tokens=0, output_tokens=0, cached_input_tokens=0, cost_usd=None)
        )
        row["input_tokens"] += int(item["input_tokens"])
        row["output_tokens"] += int(item["output_tokens"])
        row["cached_input_tokens"] += int(item["cached_input_tokens"])
        price = prices.get(str(item["model"]))
        if price is not None:
            cost = price.cost(int(item["input_tokens"]), int(item["output_tokens"]), int(item["cached_input_tokens"]))
            row["cost_usd"] = round((row["cost_usd"] or 0.0) + cost, 6)
        elif prices and row["cost_usd"] is None:
            row["cost_usd"] = None  # a model without a price: its cost is unknown, not zero
    return list(rows.values())


def _table(rows: list[UsageRow], total: UsageCounts, by: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"model usage by {by}")
    for column in (by, "input", "output", "cached input", "cost (USD)"):
        table.add_column(column, justify="left" if column == by else "right")
    for key, row in [*((r["key"], r) for r in rows), ("total", total)]:
        cost = "-" if row["cost_usd"] is None else f"{row['cost_usd']:.6f}"
        counts = (row["input_tokens"], row["output_tokens"], row["cached_input_tokens"])
        table.add_row(key, *(f"{n:,}" for n in counts), cost)
    Console().print(table)
