"""The operator's side of budgets: set, clear and report them (`chatbot budget`, `chatbot usage`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Literal, TypedDict

from chatbot.budgets import queries
from chatbot.budgets.periods import Period, period_starts
from chatbot.db.connection_options import Conn
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, UserId

Unit = Literal["tokens", "usd"]
Subject = Literal["tenant", "user", "each_user"]
PERIODS: tuple[Period, ...] = ("day", "month")
MAX_AMOUNT = Decimal(10) ** 15
"""Budgets are below this: it still prints, compares and sums exactly as a float and a JSON number."""
NO_USER = UserId("")
"""The user a tenant's own budget and the users' default are stored under (budgets.user_id)."""


class BudgetInputError(ValueError):
    """A budget command's input that cannot be a budget (negative, unknown unit or period)."""


@dataclass(frozen=True, slots=True)
class BudgetTarget:
    """Whose budget: the tenant's, one user's, or every user's default (`--each-user`)."""

    tenant_id: TenantId
    scope: Subject
    user_id: UserId = NO_USER

    @classmethod
    def of(cls, tenant_id: TenantId, user_id: UserId | None, each_user: bool) -> BudgetTarget:
        """Return the target of the command line's `--tenant`, `--user` and `--each-user`."""
        if user_id and each_user:
            raise BudgetInputError("give --user or --each-user, not both")
        if each_user:
            return cls(tenant_id, "each_user")
        return cls(tenant_id, "user", user_id) if user_id else cls(tenant_id, "tenant")


def checked_amount(amount: str, unit: str) -> Decimal:
    """Return the budget's amount, or raise BudgetInputError naming what is wrong."""
    if unit not in ("tokens", "usd"):
        raise BudgetInputError(f"unknown unit {unit!r}: give --tokens or --usd")
    try:
        value = Decimal(amount)
    except ArithmeticError:
        raise BudgetInputError(f"{amount!r} is not a number") from None
    if not value.is_finite() or not 0 < value < MAX_AMOUNT:
        raise BudgetInputError(f"a budget is a finite number above zero and below 10^15, not {amount}")
    if unit == "tokens" and value != value.to_integral_value():
        raise BudgetInputError("a token budget is a whole number of tokens")
    return value


async def set_budget(pool: Pool, target: BudgetTarget, period: Period, unit: Unit, amount: Decimal) -> bool:
    """Create or replace a budget; return whether the tenant had any budget before (else: a new tenant?)."""
    async with pool.connection() as conn:
        known = bool(await queries.tenant_budgets(conn, target.tenant_id))
        await queries.set_budget(
            conn,
            tenant=target.tenant_id,
            scope=target.scope,
            user=target.user_id,
            period=period,
            unit=unit,
            amount=float(amount) if unit == "usd" else int(amount),
        )
    return known


async def clear_budgets(pool: Pool, target: BudgetTarget, period: Period | None) -> int:
    """Delete the target's budgets (one period or both); return how many there were."""
    async with pool.connection() as conn:
        return await queries.clear_budgets(
            conn, tenant=target.tenant_id, scope=target.scope, user=target.user_id, period=period
        )


class BudgetReport(TypedDict):
    """One budget in its current period, as `chatbot budget show` and `chatbot usage` print it."""

    scope: Literal["tenant", "user"]
    user_id: UserId | None
    default: bool
    """An `each_user` default, reported for one user."""
    period: str
    starts: str
    unit: str
    limit: float
    spent: float
    reserved: float
    left: float


class TenantBudgetReport(BudgetReport):
    """A budget report naming its tenant (first), as the commands list them."""

    tenant_id: TenantId


def of_tenant(tenant_id: TenantId, row: BudgetReport) -> TenantBudgetReport:
    """Return `row` with its tenant, named first."""
    return {"tenant_id": tenant_id, **row}


async def report(
    pool: Pool, tenant_id: TenantId, now: datetime, *, user_id: UserId | None = None
) -> list[BudgetReport]:
    """Return each budget of the tenant (or of one user) in its current period: spent, reserved, left.

    An `each_user` default is reported once per user who has spent under it this period.
    Expired reservations (a killed replica's) are deleted here first: they no longer count.
    """
    day, month = period_starts(now)
    async with pool.connection() as conn:
        await queries.forget_expired(conn, tenant_id, now)
        budgets = await queries.tenant_budgets(conn, tenant_id)
        counters = await queries.counters(conn, tenant=tenant_id, day=day, month=month, now=now)
    by_key = {(c["user_id"], c["period"]): c for c in counters}
    personal = {(b["user_id"], b["period"]) for b in budgets if b["scope"] == "user"}
    rows: list[BudgetReport] = []
    for budget in budgets:
        scope, period = budget["scope"], budget["period"]
        if scope == "each_user":
            users = sorted(
                u for (u, p) in by_key if p == period and u and (u, p) not in personal and (user_id in (None, u))
            )
            subjects = users if user_id is None else [user_id] if (user_id, period) not in personal else []
        elif scope == "user":
            subjects = [budget["user_id"]] if user_id in (None, budget["user_id"]) else []
        else:
            subjects = [NO_USER] if user_id is None else []
        for subject in subjects:
            rows.append(_row(budget, subject, by_key.get((subject, period)), day if period == "day" else month))
    # The tenant's own first, then each user's (a default beside a user's own), day before month.
    return sorted(rows, key=lambda r: (r["scope"] == "user", r["user_id"] or "", r["period"]))


def _row(budget: queries.BudgetRow, subject: UserId, counter: queries.CounterRow | None, starts: date) -> BudgetReport:
    unit = budget["unit"]
    amount = _shown(budget["amount"])
    spent: Decimal | int = 0
    reserved: Decimal | int = 0
    if counter is not None:
        tokens = unit == "tokens"
        spent = (counter["spent_tokens"] if tokens else counter["spent_usd"]) or 0
        reserved = (counter["reserved_tokens"] if tokens else counter["reserved_usd"]) or 0
    as_number: Callable[[Decimal | int], float] = _tokens if unit == "tokens" else _usd
    return {
        "scope": "tenant" if budget["scope"] == "tenant" else "user",
        "user_id": subject or None,
        "default": budget["scope"] == "each_user",
        "period": budget["period"],
        "starts": str(starts),
        "unit": unit,
        "limit": as_number(amount),
        "spent": as_number(spent),
        "reserved": as_number(reserved),
        "left": as_number(max(Decimal(0), amount - _shown(spent) - _shown(reserved))),
    }


def _shown(value: Decimal | int) -> Decimal:
    """Return a stored amount as a report can print it: one set before amounts were bounded may be huge."""
    return max(-MAX_AMOUNT, min(MAX_AMOUNT, Decimal(value))) if Decimal(value).is_finite() else MAX_AMOUNT


def _tokens(value: Decimal | int) -> float:
    return int(_shown(value))


def _usd(value: Decimal | int) -> float:
    return float(_shown(value))


async def tenants_with_budgets(pool: Pool) -> list[TenantId]:
    """Return every tenant with a budget."""
    async with pool.connection() as conn:
        return await queries.tenants_with_budgets(conn)


async def sweep_expired(pool: Pool, now: datetime) -> int:
    """Delete every tenant's expired holds (a killed process's; they stopped counting); return how many."""
    async with pool.connection() as conn:
        tenants = await queries.expired_tenants(conn, now)
        return sum([await queries.forget_expired(conn, tenant, now) for tenant in tenants])


async def forget_user(conn: Conn, tenant_id: TenantId, user_id: UserId) -> int:
    """Delete a user's budgets, counters and reservations (erasure, in its transaction); return the budgets deleted."""
    return await queries.forget_user(conn, tenant_id, user_id)
