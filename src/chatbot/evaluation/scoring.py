"""Per-model figures of an evaluation: accuracy, citation hits, failures, timings, tokens, cost."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    from chatbot.evaluation.cases import Case
    from chatbot.evaluation.dry_run import CaseResult
    from chatbot.models.prices import Price

INCOMPLETE = "model_incomplete"


class Percentiles(TypedDict):
    """p50 and p95 of a timing in milliseconds (None: no value to rank)."""

    p50: float | None
    p95: float | None


class TokenTotals(TypedDict):
    """Tokens of every call a model made over the cases."""

    input: int
    output: int
    cached_input: int


class ModelSummary(TypedDict):
    """One model's entry of report.json `models`."""

    model: str
    cases: int
    status_accuracy: float | None
    citation_hit_rate: float | None
    incomplete: int
    failed: int
    latency_ms: Percentiles
    ttft_ms: Percentiles
    tokens: TokenTotals
    cost_usd: float | None


NumericMetric = Literal["cases", "status_accuracy", "citation_hit_rate", "incomplete", "failed", "cost_usd"]


def cites_expected(citations: Sequence[str], expected: Sequence[str]) -> bool:
    """Tell whether a cited chunk is, or belongs to, an expected document or chunk.

    A chunk id is `<document id>#<hash>` (retrieval/chunking.py), so the part before `#`
    is the document it belongs to.
    """
    wanted = set(expected)
    return any(c in wanted or c.partition("#")[0] in wanted for c in citations)


def percentiles(values: Sequence[float]) -> Percentiles:
    """Return p50 and p95 by nearest rank (None for no values)."""
    ordered = sorted(values)

    def rank(q: float) -> float | None:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None

    return Percentiles(p50=rank(0.50), p95=rank(0.95))


def _ratio(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _cost(results: Sequence[CaseResult], prices: Mapping[str, Price]) -> float | None:
    """Return the USD cost of every call, None without prices or when a paid call's model has none."""
    if not prices:
        return None
    total = 0.0
    for result in results:
        for call in result.usage:
            if not (call.input_tokens or call.output_tokens):
                continue  # the offline responder, or a call that never got an answer: free
            price = prices.get(call.model)
            if price is None:
                return None  # a model without a price: the cost is unknown, not zero
            total += price.cost(call.input_tokens, call.output_tokens, call.cached_input_tokens)
    return round(total, 6)


def model_summary(
    model: str, cases: Sequence[Case], results: Sequence[CaseResult], prices: Mapping[str, Price]
) -> ModelSummary:
    """Return one model's entry of report.json `models`; `results` are this model's, one per case."""
    by_case = {r.case_id: r for r in results}
    with_status = [c for c in cases if c.expect_status is not None]
    with_citations = [c for c in cases if c.expect_citations]
    right = sum(1 for c in with_status if by_case[c.id].status == c.expect_status)
    hits = sum(1 for c in with_citations if cites_expected(by_case[c.id].citations, c.expect_citations))
    calls = [call for r in results for call in r.usage]
    return {
        "model": model,
        "cases": len(results),
        "status_accuracy": _ratio(right, len(with_status)),
        "citation_hit_rate": _ratio(hits, len(with_citations)),
        "incomplete": sum(1 for r in results if r.error == INCOMPLETE),
        "failed": sum(1 for r in results if r.error is not None),
        "latency_ms": percentiles([r.latency_ms for r in results]),
        "ttft_ms": percentiles([r.ttft_ms for r in results if r.ttft_ms is not None]),
        "tokens": {
            "input": sum(c.input_tokens for c in calls),
            "output": sum(c.output_tokens for c in calls),
            "cached_input": sum(c.cached_input_tokens for c in calls),
        },
        "cost_usd": _cost(results, prices),
    }


NUMERIC_METRICS: tuple[NumericMetric, ...] = (
    "cases",
    "status_accuracy",
    "citation_hit_rate",
    "incomplete",
    "failed",
    "cost_usd",
)
"""The top-level numeric keys of every model's entry, in report order."""
