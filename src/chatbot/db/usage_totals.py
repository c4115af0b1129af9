"""The tenant's daily token totals (`model_usage_daily`): written per run, read by `chatbot usage`.

Statements name `tenant_id` by equality on the write path (the table's distribution column,
docs/scaling.md) and add parameters, never `now()`, in the upsert's SET: the day is
computed here, in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any, Literal, Protocol

from psycopg import AsyncConnection

from chatbot.ids import TenantId

CALL_TOKENS_MAX = 10_000_000
"""The most tokens one model call may count in any direction: past every model's context.

A provider's report is clamped to it where it enters (`token_count`), so a garbled or hostile
count can neither raise nor push a tenant's daily total past `bigint`."""
_BIGINT_MAX = 2**63 - 1


def token_count(value: Any) -> int:
    """Return a provider's token count as the service counts it: an int in [0, CALL_TOKENS_MAX].

    Anything else a provider may send (none, a negative, a float, a string, a bool) counts 0.
    """
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return 0
    return min(value, CALL_TOKENS_MAX)


class Call(Protocol):
    """One model call's usage (`responses.ModelCallUsage`)."""

    @property
    def kind(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cached_input_tokens(self) -> int: ...


_ADD = """
insert into model_usage_daily as t
    (tenant_id, day, model, kind, calls, input_tokens, output_tokens, cached_input_tokens)
values (%s, %s, %s, %s, %s, %s, %s, %s)
on conflict (tenant_id, day, model, kind) do update set
    calls = least(t.calls::numeric + excluded.calls, %s)::bigint,
    input_tokens = least(t.input_tokens::numeric + excluded.input_tokens, %s)::bigint,
    output_tokens = least(t.output_tokens::numeric + excluded.output_tokens, %s)::bigint,
    cached_input_tokens = least(t.cached_input_tokens::numeric + excluded.cached_input_tokens, %s)::bigint
"""
# Totals saturate at bigint's top instead of failing the write (in numeric, which cannot
# overflow there): a count is clamped where it enters, this is the last guard.

Grouping = Literal["tenant", "day", "model"]
_KEYS = {"tenant": "tenant_id", "day": "day::text", "model": "model"}


async def add(
    conn: AsyncConnection[Any], tenant_id: TenantId, calls: Sequence[Call], *, day: date | None = None
) -> None:
    """Add `calls` to the tenant's totals of `day` (today, UTC), one row per model and kind."""
    day = day or datetime.now(UTC).date()
    summed: dict[tuple[str, str], list[int]] = {}
    for call in calls:
        counts = summed.setdefault((call.model, call.kind), [0, 0, 0, 0])
        counts[0] += 1
        counts[1] += token_count(call.input_tokens)
        counts[2] += token_count(call.output_tokens)
        counts[3] += token_count(call.cached_input_tokens)
    rows = [
        (tenant_id, day, model, kind, *(min(c, _BIGINT_MAX) for c in counts), *[_BIGINT_MAX] * 4)
        for (model, kind), counts in sorted(summed.items())
    ]
    async with conn.cursor() as cur:
        await cur.executemany(_ADD, rows)


async def totals(conn: AsyncConnection[Any], *, since: date, until: date | None, by: Grouping) -> list[dict[str, Any]]:
    """Return the totals from `since` to `until` (inclusive), grouped by tenant, day or model.

    Each row: `key`, `model` (the prices are per model), `calls` and the three token counts.
    """
    key = _KEYS[by]
    query = f"""
        select {key} as key, model, sum(calls)::bigint as calls,
               sum(input_tokens)::bigint as input_tokens, sum(output_tokens)::bigint as output_tokens,
               sum(cached_input_tokens)::bigint as cached_input_tokens
        from model_usage_daily
        where day >= %s and (%s::date is null or day <= %s::date)
        group by 1, 2 order by 1, 2
    """
    cur = await conn.execute(query, (since, until, until))
    return [dict(row) for row in await cur.fetchall()]
