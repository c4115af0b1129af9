"""Budgets checked before a model call: reserve its worst case, settle it to what it used.

A call reserves its worst case (input tokens plus the call's output cap, priced with
`CHATBOT_MODEL_PRICES` at the dearest model that may answer it) against every budget
that applies to its tenant and user, all or nothing, in one statement
(`chatbot_budget_reserve`, 0009_budgets.sql): spend plus unexpired reservations never
passes a budget, whatever the number of replicas, and a call is refused only when its
worst case does not fit. After the call the reservation is settled to the usage the
provider reported (released, on a failure, by settling to nothing); a reservation whose
replica died stops counting when it expires.

With no budget set the statement finds none and writes nothing; the offline model costs
nothing and is never checked.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, NotRequired, TypedDict, Unpack

from pydantic import JsonValue

from chatbot import metrics
from chatbot.budgets import queries
from chatbot.budgets.periods import Period, period_starts, seconds_until_reset
from chatbot.db.pool import Pool
from chatbot.db.usage_totals import Call
from chatbot.ids import TenantId, UserId
from chatbot.models.chain import OFFLINE
from chatbot.models.prices import Price

log = logging.getLogger(__name__)

Scope = Literal["tenant", "user"]
CallKind = Literal["answer", "summary", "memory"]
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Return the current time, aware, in UTC (the budgets' clock unless a test injects one)."""
    return datetime.now(UTC)


class BudgetExhausted(Exception):
    """A model call's worst case does not fit a budget: which one, and when it resets."""

    def __init__(self, scope: Scope, period: Period, retry_after: int) -> None:
        super().__init__(f"{scope} {period} budget exhausted")
        self.scope: Scope = scope
        self.period: Period = period
        self.retry_after = retry_after
        """Seconds until the budget's period resets (UTC midnight, or the next month's first day)."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """A call's worst case held against the budgets of its tenant and user until it settles."""

    id: uuid.UUID
    tenant_id: str
    tokens: int
    usd: float


@dataclass(slots=True)
class Held:
    """A call in flight under a reservation: what it used, as the provider reports it."""

    calls: list[Call] = field(default_factory=list)

    def used(self, call: Call) -> None:
        """Count a reported call against the reservation (settled when the call ends)."""
        self.calls.append(call)


class CallAsk(TypedDict):
    """What `Budgets.held` passes on to `Budgets.reserve`: the call it holds the worst case of."""

    kind: CallKind
    models: Sequence[str]
    input_tokens: int
    calls: NotRequired[int]


@dataclass(eq=False)
class Budgets:
    """Reserve, settle and release model calls' spending against the budgets in Postgres."""

    pool: Pool
    _: KW_ONLY
    prices: dict[str, Price]
    output_cap: int
    """Every call's output cap (`CHATBOT_MODEL_MAX_OUTPUT_TOKENS`): the output of its worst case."""
    reservation_seconds: float
    clock: Clock = utc_now
    """Where "now" comes from: day and month roll over at UTC midnight by this clock."""

    def worst_usd(self, models: Iterable[str], input_tokens: int, output_tokens: int) -> float:
        """Return the dearest cost of the call among the models that may answer it (unpriced: 0)."""
        costs = [p.cost(input_tokens, output_tokens, 0) for m in models if (p := self.prices.get(m)) is not None]
        return max(costs, default=0.0)

    def cost(self, calls: Iterable[Call]) -> tuple[int, float]:
        """Return the tokens (input and output) and the USD cost of calls as reported."""
        tokens, usd = 0, 0.0
        for call in calls:
            tokens += call.input_tokens + call.output_tokens
            price = self.prices.get(call.model)
            if price is not None:
                usd += price.cost(call.input_tokens, call.output_tokens, call.cached_input_tokens)
        return tokens, usd

    async def reserve(
        self,
        tenant_id: TenantId,
        user_id: UserId,
        *,
        kind: CallKind,
        models: Sequence[str],
        input_tokens: int,
        calls: int = 1,
    ) -> Reservation | None:
        """Reserve a call's worst case (`input_tokens` plus the output cap); None when no budget applies.

        `calls`: how many calls the reservation covers at most (an answer chain of n entries:
        each entry that fails before the answer may still be billed, then the next is asked).
        Raises BudgetExhausted naming the first budget the worst case does not fit.
        """
        if not models or all(m == OFFLINE for m in models):
            return None  # the offline model costs nothing
        tokens = calls * (input_tokens + self.output_cap)
        usd = calls * self.worst_usd(models, input_tokens, self.output_cap)
        now = self.clock()
        day, month = period_starts(now)
        reservation = Reservation(uuid.uuid4(), tenant_id, tokens, usd)
        async with self.pool.connection() as conn:
            row = await queries.reserve(
                conn,
                tenant=tenant_id,
                user=user_id,
                reservation=reservation.id,
                tokens=tokens,
                usd=usd,
                day=day,
                month=month,
                now=now,
                expires=now + timedelta(seconds=self.reservation_seconds),
            )
        if row["outcome"] == "none":
            return None
        if row["outcome"] == "refused":
            scope, period = row["refused_scope"], row["refused_period"]
            assert scope is not None and period is not None  # a refusal names the budget that refused
            metrics.BUDGET_REFUSALS.labels(scope, period, kind).inc()
            raise BudgetExhausted(scope, period, seconds_until_reset(period, now))
        if row["tenant_share_left"] is not None:
            metrics.BUDGET_SHARE_LEFT.labels(tenant_id).set(max(0.0, float(row["tenant_share_left"])))
        return reservation

    async def settle(self, reservation: Reservation | None, calls: Sequence[Call]) -> None:
        """Replace the reservation by what the calls used; never raises (logged instead).

        A reservation that cannot be settled (Postgres unreachable) stops counting when it
        expires; the spend it stood for is then not counted, which the warning says.
        """
        if reservation is None:
            return
        tokens, usd = self.cost(calls)
        try:
            async with self.pool.connection() as conn:
                await queries.settle(
                    conn, tenant=reservation.tenant_id, reservation=reservation.id, tokens=tokens, usd=usd
                )
        except Exception as exc:  # a budget's bookkeeping never fails the run it counted
            log.warning(
                "budget reservation not settled",
                extra={"tenant_id": reservation.tenant_id, "error": type(exc).__name__},
            )

    async def settle_on(self, conn: queries.Conn, reservation: Reservation, calls: Sequence[Call]) -> None:
        """Settle on a connection the caller holds (pipelined with its own statements); errors are the caller's."""
        tokens, usd = self.cost(calls)
        await queries.settle(conn, tenant=reservation.tenant_id, reservation=reservation.id, tokens=tokens, usd=usd)

    async def release(self, reservation: Reservation | None) -> None:
        """Release a reservation whose call was never sent, or sent nothing billable."""
        await self.settle(reservation, ())

    @asynccontextmanager
    async def held(self, tenant_id: TenantId, user_id: UserId, **call: Unpack[CallAsk]) -> AsyncIterator[Held]:
        """Hold a call's worst case while it runs; settle to what `Held.used` was told when it ends.

        `call` as `reserve` takes it. Raises BudgetExhausted on entry when the worst case does
        not fit. A call that fails or is cancelled settles to what it reported (nothing: released).
        """
        reservation = await self.reserve(tenant_id, user_id, **call)
        held = Held()
        try:
            yield held
        finally:
            # Shielded: a cancelled call still gives its reservation back.
            await asyncio.shield(self.settle(reservation, held.calls))


def budget_member(exc: BudgetExhausted) -> dict[str, JsonValue]:
    """Return the problem's `budget` member: which budget refused the call."""
    return {"scope": exc.scope, "period": exc.period}
