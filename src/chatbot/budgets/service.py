"""Budgets checked before a model call: hold what it may cost, settle it to what it used.

A call holds its counted input plus the output it may still produce against every budget
that applies to its tenant and user, all or nothing, in one statement
(`chatbot_budget_hold`, 0011_budget_holds.sql). The output part is the call's output cap
lowered to what every budget has left, and the provider is sent that lowered cap as its
`max_tokens`: a call is refused only when its input plus a useful minimum
(`output_floor`) does not fit, and spend plus holds never passes a budget, whatever the
number of replicas. Calls in flight at once on a budget share its room: each is given at
most its share of the output room, never less than the floor. Priced with
`CHATBOT_MODEL_PRICES`; under a currency budget a model without a price is refused
(`ModelUnpriced`), never let through uncounted.

A run's answer is held in two steps (`admit`, then `size`): at the run's start, before its
stream, a hold of the caller's latest answer windows (at least the prompt and the question)
plus the floor, so a run that cannot be afforded is refused with a 429; at the model step,
the same hold resized to the window's real count and the output that fits. Summary and
memory calls are held the same way in one step (`held` with `sized`). After the call the hold is settled
to the usage the provider reported (released, on a failure, by settling to nothing).

A live process renews its holds (`HoldKeeper`, budgets/_keeper.py) every third of
`CHATBOT_BUDGET_RESERVATION_SECONDS`; a killed one's stop counting when they expire, and the
replicas' sweep deletes them (ops/sweeper.py).

With no budget set the statement finds none and writes nothing; the offline model costs
nothing and is never checked.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, NotRequired, TypedDict, TypeVar, Unpack

from langchain_core.language_models import BaseChatModel
from pydantic import JsonValue

from chatbot import metrics
from chatbot.budgets import queries
from chatbot.budgets._keeper import HoldKeeper
from chatbot.budgets.periods import Period, period_starts, seconds_until_reset
from chatbot.db.connection_options import Conn
from chatbot.db.pool import Pool
from chatbot.db.usage_totals import Call
from chatbot.ids import TenantId, UserId
from chatbot.models.chain import OFFLINE
from chatbot.models.prices import Price

log = logging.getLogger(__name__)

Scope = Literal["tenant", "user"]
CallKind = Literal["answer", "summary", "memory"]
Clock = Callable[[], datetime]
T = TypeVar("T")

# How many of a caller's latest answer windows the early hold of their next run is sized on,
# and of how many callers this replica remembers them.
RECENT_WINDOWS = 8
REMEMBERED_CALLERS = 4096


def utc_now() -> datetime:
    """Return the current time, aware, in UTC (the budgets' clock unless a test injects one)."""
    return datetime.now(UTC)


class BudgetExhausted(Exception):
    """A model call does not fit a budget: which one, and when it resets."""

    reason = "budget_exhausted"
    """The problem's `reason` member when a run is refused."""

    def __init__(self, scope: Scope, period: Period, retry_after: int) -> None:
        super().__init__(f"{scope} {period} budget exhausted")
        self.scope: Scope = scope
        self.period: Period = period
        self.retry_after = retry_after
        """Seconds until the budget's period resets (UTC midnight, or the next month's first day)."""


class ModelUnpriced(BudgetExhausted):
    """A currency budget applies and a model that may answer has no price: it cannot be counted."""

    reason = "model_unpriced"


@dataclass(frozen=True, slots=True)
class Reservation:
    """A call's hold against the budgets of its tenant and user, until it settles."""

    id: uuid.UUID
    tenant_id: TenantId
    user_id: UserId
    kind: CallKind
    output_tokens: int
    """The output the hold allows the call: the provider's `max_tokens`."""


@dataclass(slots=True)
class Held:
    """A call in flight under a reservation: the output it may produce, what it used as reported."""

    calls: list[Call] = field(default_factory=list)
    output_tokens: int | None = None
    """The output the call may produce (its `max_tokens`); None: the model's own cap (no budget applies)."""

    def used(self, call: Call) -> None:
        """Count a reported call against the reservation (settled when the call ends)."""
        self.calls.append(call)


class CallAsk(TypedDict):
    """What `Budgets.held` passes on to `Budgets.reserve`: the call it holds the worst case of."""

    kind: CallKind
    models: Sequence[str]
    input_tokens: int
    calls: NotRequired[int]
    sized: NotRequired[bool]


AnswerSizer = Callable[[str, int, Sequence[Call]], Awaitable[int]]
"""Sizes one answer call at the model step: (model, counted input, calls so far) to its max output."""


@dataclass(eq=False)
class Budgets:
    """Hold, settle and release model calls' spending against the budgets in Postgres."""

    pool: Pool
    _: KW_ONLY
    prices: dict[str, Price]
    output_cap: int
    """Every call's output cap (`CHATBOT_MODEL_MAX_OUTPUT_TOKENS`): the most output a call is given."""
    reservation_seconds: float
    output_floor: int = 128
    """The least output an answer call is sent with (a short answer): a budget with less room refuses it."""
    answer_input_bound: int = 0
    """The most input an answer call may send (CHATBOT_CONTEXT_TOKENS, its schema and framing)."""
    clock: Clock = utc_now
    """Where "now" comes from: day and month roll over at UTC midnight by this clock."""
    _windows: dict[tuple[TenantId, UserId], deque[int]] = field(default_factory=dict, init=False)
    _recent: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_WINDOWS), init=False)
    _keeper: HoldKeeper = field(init=False)

    def __post_init__(self) -> None:
        self._keeper = HoldKeeper(self.pool, every=self.reservation_seconds / 3, expiry=self._expiry)

    def _expiry(self) -> datetime:
        return self.clock() + timedelta(seconds=self.reservation_seconds)

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

    def _priced(self, models: Iterable[str]) -> bool:
        return all(m in self.prices for m in models)

    async def _hold(
        self,
        tenant_id: TenantId,
        user_id: UserId,
        hold_id: uuid.UUID,
        *,
        kind: CallKind,
        tokens: int,
        usd: float,
        output: tuple[int, int, float] = (0, 0, 0.0),
        priced: bool,
    ) -> int | None:
        """Hold `tokens`/`usd` plus the output that fits in `output` (most, least, usd per token).

        Return the output granted; None when no budget applies (nothing held). Raises
        BudgetExhausted (ModelUnpriced) naming the budget that refused.
        """
        out_max, out_min, usd_per_out = output
        now = self.clock()
        day, month = period_starts(now)
        ask: queries.HoldAsk = {
            "tenant": tenant_id,
            "user": user_id,
            "id": hold_id,
            "tokens": tokens,
            "usd": usd,
            "out_max": out_max,
            "out_min": out_min,
            "usd_per_out": usd_per_out,
            "priced": priced,
            "day": day,
            "month": month,
            "now": now,
            "expires": self._expiry(),
        }
        async with self.pool.connection() as conn:
            row = await queries.hold(conn, ask)
        outcome = row["outcome"]
        if outcome == "none":
            return None
        if outcome in ("refused", "unpriced"):
            scope, period = row["refused_scope"], row["refused_period"]
            assert scope is not None and period is not None  # a refusal names the budget that refused
            metrics.BUDGET_REFUSALS.labels(scope, period, kind).inc()
            if outcome == "unpriced":
                log.warning("model without a price under a currency budget", extra={"tenant_id": tenant_id})
                raise ModelUnpriced(scope, period, seconds_until_reset(period, now))
            raise BudgetExhausted(scope, period, seconds_until_reset(period, now))
        self._keeper.keep(hold_id, tenant_id)
        if row["tenant_share_left"] is not None:
            metrics.BUDGET_SHARE_LEFT.labels(tenant_id).set(max(0.0, float(row["tenant_share_left"])))
        return int(row["granted"])

    async def reserve(
        self,
        tenant_id: TenantId,
        user_id: UserId,
        *,
        kind: CallKind,
        models: Sequence[str],
        input_tokens: int,
        calls: int = 1,
        sized: bool = False,
    ) -> Reservation | None:
        """Hold a call's input plus its output; None when no budget applies.

        The output is the whole cap, or with `sized` the output that fits (at least the
        floor), which the caller then sends as the call's `max_tokens`. `calls`: how many
        calls the reservation covers at most. Raises BudgetExhausted naming the first budget
        that does not fit.
        """
        if not models or all(m == OFFLINE for m in models):
            return None  # the offline model costs nothing
        hold_id = uuid.uuid4()
        if sized:
            per_out = max((p.cost(0, 1, 0) for m in models if (p := self.prices.get(m)) is not None), default=0.0)
            granted = await self._hold(
                tenant_id,
                user_id,
                hold_id,
                kind=kind,
                tokens=calls * input_tokens,
                usd=calls * self.worst_usd(models, input_tokens, 0),
                output=(self.output_cap, min(self.output_floor, self.output_cap), calls * per_out),
                priced=self._priced(models),
            )
        else:
            granted = await self._hold(
                tenant_id,
                user_id,
                hold_id,
                kind=kind,
                tokens=calls * (input_tokens + self.output_cap),
                usd=calls * self.worst_usd(models, input_tokens, self.output_cap),
                priced=self._priced(models),
            )
            granted = None if granted is None else self.output_cap
        return None if granted is None else Reservation(hold_id, tenant_id, user_id, kind, granted)

    async def admit(
        self, tenant_id: TenantId, user_id: UserId, models: Sequence[str], *, input_floor: int = 0
    ) -> Reservation | None:
        """Hold a run's answer early, before its stream starts: a likely window plus the output floor.

        The window is not built yet: its size is taken as the largest of the caller's latest
        windows on this replica (of anyone's, for a caller it has not served lately), and at
        least `input_floor` (the prompt and the question).
        `size` replaces the hold at the model step. Raises BudgetExhausted when even that does
        not fit; None when no budget applies.
        """
        if not models or all(m == OFFLINE for m in models):
            return None
        # A caller this replica has not served lately: the windows it served anyone lately (a
        # first window is built from the same knowledge and prompt as the others).
        seen = self._windows.get((tenant_id, user_id)) or self._recent
        likely = max(max(seen, default=input_floor), input_floor)
        floor = min(self.output_floor, self.output_cap)
        hold_id = uuid.uuid4()
        granted = await self._hold(
            tenant_id,
            user_id,
            hold_id,
            kind="answer",
            tokens=likely + floor,
            usd=self.worst_usd(models, likely, floor),
            priced=self._priced(models),
        )
        return None if granted is None else Reservation(hold_id, tenant_id, user_id, "answer", floor)

    def _seen(self, tenant_id: TenantId, user_id: UserId, input_tokens: int) -> None:
        """Remember a caller's counted answer window: their next run's early hold is sized on it."""
        key = (tenant_id, user_id)
        windows = self._windows.pop(key, None) or deque(maxlen=RECENT_WINDOWS)
        windows.append(input_tokens)
        self._recent.append(input_tokens)
        self._windows[key] = windows  # the most recent last: the oldest caller is forgotten first
        if len(self._windows) > REMEMBERED_CALLERS:
            del self._windows[next(iter(self._windows))]

    async def size(self, reservation: Reservation, *, model: str, input_tokens: int, spent: Sequence[Call]) -> int:
        """Resize an answer's hold to its counted input plus the output that fits; return that output.

        `spent`: the calls of the chain made before this one (billed, they stay held). Raises
        BudgetExhausted when the input plus the output floor does not fit (the hold is kept).
        """
        self._seen(reservation.tenant_id, reservation.user_id, input_tokens)
        price = self.prices.get(model)
        tokens, usd = self.cost(spent)
        granted = await self._hold(
            reservation.tenant_id,
            reservation.user_id,
            reservation.id,
            kind="answer",
            tokens=tokens + input_tokens,
            usd=usd + (price.cost(input_tokens, 0, 0) if price is not None else 0.0),
            output=(self.output_cap, min(self.output_floor, self.output_cap), price.cost(0, 1, 0) if price else 0.0),
            priced=price is not None,
        )
        return self.output_cap if granted is None else granted

    def sizer(self, reservation: Reservation | None) -> AnswerSizer | None:
        """Return the model step's sizing of a run's answer held by `reservation` (None: unchecked)."""
        if reservation is None:
            return None

        async def size(model: str, input_tokens: int, spent: Sequence[Call]) -> int:
            return await self.size(reservation, model=model, input_tokens=input_tokens, spent=spent)

        return size

    async def settle(self, reservation: Reservation | None, calls: Sequence[Call]) -> None:
        """Replace the reservation by what the calls used; never raises (logged instead).

        Completed even when the caller is cancelled meanwhile (the cancel is raised after it):
        an interrupted process gives its holds back before it exits. A reservation that cannot
        be settled (Postgres unreachable) stops counting when it expires; the spend it stood
        for is then not counted, which the warning says.
        """
        if reservation is None:
            return
        await _through_cancel(self._settle(reservation, calls))

    async def _settle(self, reservation: Reservation, calls: Sequence[Call]) -> None:
        tokens, usd = self.cost(calls)
        try:
            async with self.pool.connection() as conn:
                await queries.settle(
                    conn, tenant=reservation.tenant_id, reservation=reservation.id, tokens=tokens, usd=usd
                )
            self._keeper.forget(reservation.id)
        except Exception as exc:  # a budget's bookkeeping never fails the run it counted
            log.warning(
                "budget reservation not settled",
                extra={"tenant_id": reservation.tenant_id, "error": type(exc).__name__},
            )

    async def settle_on(self, conn: Conn, reservation: Reservation, calls: Sequence[Call]) -> None:
        """Settle on a connection the caller holds (pipelined with its own statements); errors are the caller's."""
        tokens, usd = self.cost(calls)
        await queries.settle(conn, tenant=reservation.tenant_id, reservation=reservation.id, tokens=tokens, usd=usd)
        self._keeper.forget(reservation.id)

    async def release(self, reservation: Reservation | None) -> None:
        """Release a reservation whose call was never sent, or sent nothing billable."""
        await self.settle(reservation, ())

    @asynccontextmanager
    async def held(self, tenant_id: TenantId, user_id: UserId, **call: Unpack[CallAsk]) -> AsyncIterator[Held]:
        """Hold a call while it runs; settle to what `Held.used` was told when it ends.

        `call` as `reserve` takes it; with `sized`, `Held.output_tokens` is the output the call
        may produce (send it as the call's `max_tokens`). Raises BudgetExhausted on entry when the worst case does
        not fit. A call that fails or is cancelled settles to what it reported (nothing: released).
        """
        reservation = await self.reserve(tenant_id, user_id, **call)
        held = Held(output_tokens=None if reservation is None else reservation.output_tokens)
        try:
            yield held
        finally:
            await self.settle(reservation, held.calls)

    async def close(self) -> None:
        """Stop renewing, and release every hold still live (an interrupted process's calls)."""
        await self._keeper.close()


async def _through_cancel(work: Awaitable[T]) -> T:
    """Await `work` to its end even when the caller is cancelled meanwhile; then re-raise the cancel."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


def with_output_cap(model: BaseChatModel, max_tokens: int | None) -> BaseChatModel:
    """Return `model` sending at most `max_tokens` of output (what a hold allows); None: `model` itself.

    A copy with the provider's own field lowered (`max_tokens`, Ollama's `num_predict`), its
    client shared; a model class with neither field is returned as it is.
    """
    if max_tokens is None:
        return model
    for name in ("max_tokens", "num_predict"):
        if name in type(model).model_fields:
            return model.model_copy(update={name: max_tokens})
    return model


def budget_refusal_detail(exc: BudgetExhausted) -> str:
    """Return the problem's `detail` of a refused run: which budget, and why it refused."""
    if isinstance(exc, ModelUnpriced):
        return (
            f"the {exc.scope}'s {exc.period} budget is in currency and a model that may answer has no price "
            "(CHATBOT_MODEL_PRICES): the call cannot be counted, so it is not sent"
        )
    return f"the {exc.scope}'s {exc.period} budget for model spending is exhausted"


def budget_member(exc: BudgetExhausted) -> dict[str, JsonValue]:
    """Return the problem's `budget` member: which budget refused the call."""
    return {"scope": exc.scope, "period": exc.period}
