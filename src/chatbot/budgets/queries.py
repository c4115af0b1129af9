"""The budgets feature's own SQL: `budgets`, `budget_counters`, `budget_reservations`.

Statements as module constants beside the small functions that run them on a connection
the caller passes in. Every statement names `tenant_id` by equality (the tables'
distribution column, docs/scaling.md); a hold and its settlement are functions of the
migrations (0011_budget_holds.sql, 0009_budgets.sql), one statement each.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Literal
from uuid import UUID

from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict

from chatbot.budgets.periods import Period
from chatbot.db.connection_options import Conn
from chatbot.ids import TenantId, UserId

# `numeric` holds Infinity and NaN (amounts stored before they were bounded, or by hand): they
# are read as they are, as before the rows were validated (budgets/admin.py bounds what it shows).
_NUMERIC_AS_STORED = ConfigDict(allow_inf_nan=True)


@with_config(_NUMERIC_AS_STORED)
class Held(TypedDict):
    """What `chatbot_budget_hold` answered (HOLD's columns)."""

    outcome: str
    """held, refused, unpriced (a currency budget and a model without a price) or none (no budget applies)."""
    refused_scope: Literal["tenant", "user"] | None
    refused_period: Period | None
    tenant_share_left: Decimal | None
    granted: int
    """The output tokens the hold allows the call (what it asked at most, lowered to fit)."""


@with_config(_NUMERIC_AS_STORED)
class BudgetRow(TypedDict):
    """One budget as stored (TENANT_BUDGETS's columns)."""

    scope: str
    """tenant, user or each_user."""
    user_id: UserId
    period: str
    unit: str
    amount: Decimal


@with_config(_NUMERIC_AS_STORED)
class CounterRow(TypedDict):
    """One subject's counter of a current period, unexpired reservations summed (COUNTERS's columns)."""

    user_id: UserId
    period: str
    starts: date
    spent_tokens: int
    spent_usd: Decimal
    reserved_tokens: Decimal | int
    reserved_usd: Decimal | int


# The rows are validated where they are read: a column of another shape (an outcome or a scope
# the functions of the migrations never return) raises instead of passing as a wrong value.
# Built once: `hold` runs before every model call.
_HELD: TypeAdapter[Held] = TypeAdapter(Held)
_BUDGET_ROWS: TypeAdapter[list[BudgetRow]] = TypeAdapter(list[BudgetRow])
_COUNTER_ROWS: TypeAdapter[list[CounterRow]] = TypeAdapter(list[CounterRow])


HOLD = """
select outcome, refused_scope, refused_period, tenant_share_left, granted
from chatbot_budget_hold(
    %(tenant)s::text, %(user)s::text, %(id)s::uuid, %(tokens)s::bigint, %(usd)s::numeric,
    %(out_max)s::bigint, %(out_min)s::bigint, %(usd_per_out)s::numeric, %(priced)s::boolean,
    %(day)s::date, %(month)s::date, %(now)s::timestamptz, %(expires)s::timestamptz
)
"""
# A live process keeps its holds: a killed one's stop counting when they expire.
RENEW = "update budget_reservations set expires_at = %s where tenant_id = %s and id = any(%s::uuid[])"
# Rare work, all shards: which tenants have expired holds for the sweep to delete.
EXPIRED_TENANTS = "select distinct tenant_id from budget_reservations where expires_at <= %s"
SETTLE = "select chatbot_budget_settle(%s::text, %s::uuid, %s::bigint, %s::numeric)"
SET_BUDGET = """
insert into budgets as b (tenant_id, scope, user_id, period, unit, amount)
values (%(tenant)s, %(scope)s, %(user)s, %(period)s, %(unit)s, %(amount)s)
on conflict (tenant_id, scope, user_id, period) do update set unit = excluded.unit, amount = excluded.amount
"""
CLEAR_BUDGETS = """
delete from budgets
where tenant_id = %(tenant)s and scope = %(scope)s and user_id = %(user)s
  and (%(period)s::text is null or period = %(period)s::text)
"""
TENANT_BUDGETS = """
select scope, user_id, period, unit, amount from budgets
where tenant_id = %s order by scope, user_id, period
"""
# One subject's counters of the current periods, with what unexpired reservations hold.
COUNTERS = """
select c.user_id, c.period, c.starts, c.spent_tokens, c.spent_usd,
       coalesce((select sum(r.tokens) from budget_reservations r
                 where r.tenant_id = c.tenant_id and r.user_id = c.user_id and r.period = c.period
                   and r.starts = c.starts and r.expires_at > %(now)s), 0) as reserved_tokens,
       coalesce((select sum(r.usd) from budget_reservations r
                 where r.tenant_id = c.tenant_id and r.user_id = c.user_id and r.period = c.period
                   and r.starts = c.starts and r.expires_at > %(now)s), 0) as reserved_usd
from budget_counters c
where c.tenant_id = %(tenant)s
  and ((c.period = 'day' and c.starts = %(day)s) or (c.period = 'month' and c.starts = %(month)s))
"""
# Rare work (the commands): expired reservations no longer count; their rows go here.
FORGET_EXPIRED = "delete from budget_reservations where tenant_id = %s and expires_at <= %s"
FORGET_USER_BUDGETS = "delete from budgets where tenant_id = %s and user_id = %s"
FORGET_USER_COUNTERS = "delete from budget_counters where tenant_id = %s and user_id = %s"
FORGET_USER_RESERVATIONS = "delete from budget_reservations where tenant_id = %s and user_id = %s"
TENANTS_WITH_BUDGETS = "select distinct tenant_id from budgets order by tenant_id"


class HoldAsk(TypedDict):
    """One hold as `chatbot_budget_hold` takes it (HOLD's parameters)."""

    tenant: TenantId
    user: UserId
    id: UUID
    tokens: int
    usd: float
    out_max: int
    out_min: int
    usd_per_out: float
    priced: bool
    day: date
    month: date
    now: datetime
    expires: datetime


async def hold(conn: Conn, ask: HoldAsk) -> Held:
    """Hold (or resize the hold of) a call against every applicable budget, all or nothing."""
    cur = await conn.execute(HOLD, dict(ask))
    row = await cur.fetchone()
    assert row is not None  # the function always returns one row
    return _HELD.validate_python(row)


async def renew(conn: Conn, tenant: TenantId, ids: list[UUID], expires: datetime) -> None:
    """Move the expiry of a tenant's live holds to `expires`."""
    await conn.execute(RENEW, (expires, tenant, ids))


async def expired_tenants(conn: Conn, now: datetime) -> list[TenantId]:
    """Return the tenants with holds that expired by `now`."""
    cur = await conn.execute(EXPIRED_TENANTS, (now,))
    return [TenantId(str(row["tenant_id"])) for row in await cur.fetchall()]


async def settle(conn: Conn, *, tenant: TenantId, reservation: UUID, tokens: int, usd: float) -> None:
    """Replace a reservation by the call's real usage (0 and 0: release it)."""
    await conn.execute(SETTLE, (tenant, reservation, tokens, usd))


async def set_budget(
    conn: Conn, *, tenant: TenantId, scope: str, user: UserId, period: str, unit: str, amount: float
) -> None:
    """Create or replace one budget."""
    params = {"tenant": tenant, "scope": scope, "user": user, "period": period, "unit": unit, "amount": amount}
    await conn.execute(SET_BUDGET, params)


async def clear_budgets(conn: Conn, *, tenant: TenantId, scope: str, user: UserId, period: str | None) -> int:
    """Delete a subject's budgets (of one period, or both); return how many there were."""
    cur = await conn.execute(CLEAR_BUDGETS, {"tenant": tenant, "scope": scope, "user": user, "period": period})
    return cur.rowcount


async def tenant_budgets(conn: Conn, tenant: TenantId) -> list[BudgetRow]:
    """Return the tenant's budgets: scope, user_id, period, unit, amount."""
    cur = await conn.execute(TENANT_BUDGETS, (tenant,))
    return _BUDGET_ROWS.validate_python(await cur.fetchall())


async def counters(conn: Conn, *, tenant: TenantId, day: date, month: date, now: datetime) -> list[CounterRow]:
    """Return the tenant's counters of the periods starting `day` and `month`, reservations summed."""
    cur = await conn.execute(COUNTERS, {"tenant": tenant, "day": day, "month": month, "now": now})
    return _COUNTER_ROWS.validate_python(await cur.fetchall())


async def forget_expired(conn: Conn, tenant: TenantId, now: datetime) -> int:
    """Delete the tenant's reservations that expired (a killed replica's): they no longer count; return how many."""
    cur = await conn.execute(FORGET_EXPIRED, (tenant, now))
    return cur.rowcount


async def forget_user(conn: Conn, tenant: TenantId, user: UserId) -> int:
    """Delete a user's budgets, counters and reservations (erasure); return the budgets deleted."""
    cur = await conn.execute(FORGET_USER_BUDGETS, (tenant, user))
    deleted = cur.rowcount
    await conn.execute(FORGET_USER_COUNTERS, (tenant, user))
    await conn.execute(FORGET_USER_RESERVATIONS, (tenant, user))
    return deleted


async def tenants_with_budgets(conn: Conn) -> list[TenantId]:
    """Return every tenant with a budget (`chatbot usage` reports theirs); rare work, all shards."""
    cur = await conn.execute(TENANTS_WITH_BUDGETS)
    return [TenantId(str(row["tenant_id"])) for row in await cur.fetchall()]
