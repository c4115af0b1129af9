"""`chatbot budget set|show|clear`: caps on model spending per tenant and per user (budgets/).

    chatbot budget set --tenant T [--user U | --each-user] (--daily | --monthly) AMOUNT (--tokens | --usd)
    chatbot budget show --tenant T [--user U]
    chatbot budget clear --tenant T [--user U | --each-user] [--daily | --monthly]

Tenants are not registered in this service: a budget for a tenant nothing is known of is set
with a warning (a typo would otherwise cap nobody, silently).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

import typer

from chatbot.budgets.periods import Period
from chatbot.cli import common
from chatbot.ids import TenantId, UserId

if TYPE_CHECKING:
    from collections.abc import Sequence

    from chatbot.budgets.admin import BudgetReport, TenantBudgetReport, Unit

budget_app = typer.Typer(
    help="Caps on model spending per tenant and per user, per UTC day and month.", no_args_is_help=True
)


def _optional_id(value: str | None) -> str | None:
    return None if value is None else common.caller_id(value)


def _period(daily: bool, monthly: bool, *, required: bool) -> Period | None:
    if daily and monthly:
        common.fail("give --daily or --monthly, not both", 2)
    if not (daily or monthly):
        if required:
            common.fail("give --daily or --monthly", 2)
        return None
    return "day" if daily else "month"


def _unit(tokens: bool, usd: bool) -> Unit:
    if tokens == usd:
        common.fail("give the unit: --tokens or --usd (one of them)", 2)
    return "tokens" if tokens else "usd"


# Negative amounts must reach the check (a clear error) instead of reading as an unknown option.
@budget_app.command("set", context_settings={"ignore_unknown_options": True})
def set_command(
    given: list[str] = typer.Argument(..., metavar="AMOUNT", help="The cap: whole tokens, or US dollars."),
    tenant: str = typer.Option(..., "--tenant", callback=common.caller_id),
    user: str | None = typer.Option(None, "--user", help="One user of the tenant.", callback=_optional_id),
    each_user: bool = typer.Option(False, "--each-user", help="The default of every user without one of their own."),
    daily: bool = typer.Option(False, "--daily", help="Per UTC day."),
    monthly: bool = typer.Option(False, "--monthly", help="Per UTC calendar month."),
    tokens: bool = typer.Option(False, "--tokens", help="Counted in tokens (input plus output)."),
    usd: bool = typer.Option(False, "--usd", help="Counted in US dollars, priced with CHATBOT_MODEL_PRICES."),
) -> None:
    """Set (or replace) a budget; model calls that would pass it are refused (runs: 429 budget_exhausted)."""
    from chatbot.budgets.admin import BudgetInputError, BudgetTarget, checked_amount, set_budget
    from chatbot.db.pool import open_pool
    from chatbot.models.prices import PricesError, parse_prices

    # Unknown options arrive here too (so that "-5" reaches the amount check): name them.
    unknown = [word for word in given if word.startswith("--")]
    if unknown:
        common.fail(f"unknown unit or option {', '.join(unknown)}: the unit is --tokens or --usd", 2)
    if len(given) != 1:
        common.fail(f"one AMOUNT, got {len(given)}: {' '.join(given)}", 2)
    amount = given[0]
    period = _period(daily, monthly, required=True)
    assert period is not None
    unit = _unit(tokens, usd)
    try:
        target = BudgetTarget.of(TenantId(tenant), _user_id(user), each_user)
        value = checked_amount(amount, unit)
    except BudgetInputError as exc:
        common.fail(str(exc), 2)
        return
    settings = common.load_settings(environment="dev")  # needs no token key
    if unit == "usd":
        try:
            prices = parse_prices(settings.model_prices)
        except PricesError as exc:
            common.fail(str(exc), 2)
            return
        if not prices:
            typer.echo("warning: CHATBOT_MODEL_PRICES is not set here: the replicas need it to count dollars", err=True)

    async def _go() -> bool:
        from chatbot.db import usage_totals

        async with open_pool(settings, max_size=1) as pool:
            known = await set_budget(pool, target, period, unit, value)
            if known:
                return True
            async with pool.connection() as conn:
                used = await usage_totals.totals(conn, since=date(2000, 1, 1), until=None, by="tenant")
            return any(row["key"] == tenant for row in used)

    if not common.run(_go()):
        typer.echo(
            f"warning: no model usage or budget is recorded for tenant {tenant!r}; tenants are not registered "
            "here, so check the name: the budget is set",
            err=True,
        )
    who = {"tenant": "tenant", "user": f"user {target.user_id!r} of tenant", "each_user": "each user of tenant"}
    typer.echo(f"set: {who[target.scope]} {tenant!r}, {'daily' if period == 'day' else 'monthly'}: {value} {unit}")


@budget_app.command("show")
def show_command(
    tenant: str = typer.Option(..., "--tenant", callback=common.caller_id),
    user: str | None = typer.Option(None, "--user", help="Only this user's budgets.", callback=_optional_id),
    output: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """Show each budget in its current period: limit, spent, reserved (calls in flight), left."""
    if output not in ("table", "json"):
        common.fail("--format must be table or json", 2)
    from chatbot.budgets.admin import of_tenant

    tenant_id = TenantId(tenant)
    rows = [of_tenant(tenant_id, row) for row in common.run(_report(tenant_id, _user_id(user)))]
    if output == "json":
        typer.echo(json.dumps({"tenant": tenant, "budgets": rows}, ensure_ascii=False))
    elif not rows:
        typer.echo(f"no budget for tenant {tenant!r}" + (f" and user {user!r}" if user else "") + ": no limit")
    else:
        print_budgets(rows, title=f"budgets of {tenant}")


@budget_app.command("clear")
def clear_command(
    tenant: str = typer.Option(..., "--tenant", callback=common.caller_id),
    user: str | None = typer.Option(None, "--user", callback=_optional_id),
    each_user: bool = typer.Option(False, "--each-user"),
    daily: bool = typer.Option(False, "--daily"),
    monthly: bool = typer.Option(False, "--monthly"),
) -> None:
    """Remove budgets (both periods unless --daily or --monthly): no budget means no limit."""
    from chatbot.budgets.admin import BudgetInputError, BudgetTarget, clear_budgets
    from chatbot.db.pool import open_pool

    period = _period(daily, monthly, required=False)
    try:
        target = BudgetTarget.of(TenantId(tenant), _user_id(user), each_user)
    except BudgetInputError as exc:
        common.fail(str(exc), 2)
        return
    settings = common.load_settings(environment="dev")

    async def _go() -> int:
        async with open_pool(settings, max_size=1) as pool:
            return await clear_budgets(pool, target, period)

    cleared = common.run(_go())
    typer.echo(f"cleared: {cleared} budget(s)" if cleared else "nothing to clear: no such budget")


async def _report(tenant_id: TenantId, user_id: UserId | None) -> list[BudgetReport]:
    from chatbot.budgets.admin import report
    from chatbot.db.pool import open_pool

    settings = common.load_settings(environment="dev")
    async with open_pool(settings, max_size=1) as pool:
        return await report(pool, tenant_id, datetime.now(UTC), user_id=user_id)


def print_budgets(rows: Sequence[TenantBudgetReport], *, title: str) -> None:
    """Print budgets as a table: whose, period, unit, limit, spent, reserved, left."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("budget", "period from", "unit", "limit", "spent", "reserved", "left"):
        table.add_column(column, justify="right" if column in ("limit", "spent", "reserved", "left") else "left")
    for row in rows:
        whose = row["tenant_id"] if row["scope"] == "tenant" else f"{row['tenant_id']}/{row['user_id']}"
        table.add_row(
            whose + (" (each user)" if row["default"] else ""),
            f"{row['period']} {row['starts']}",
            row["unit"],
            *(_amount(row[k], row["unit"]) for k in ("limit", "spent", "reserved", "left")),
        )
    Console().print(table)


def _amount(value: float, unit: str) -> str:
    return f"{int(value):,}" if unit == "tokens" else f"{value:.6f}"


def _user_id(option: str | None) -> UserId | None:
    """Return `--user` as the id it names (the command line is where it enters), None without it."""
    return None if option is None else UserId(option)
