"""Run every case on every candidate, a few at a time, and gather the report."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

from chatbot.budgets.service import Budgets
from chatbot.config import Settings
from chatbot.evaluation.candidates import Candidate
from chatbot.evaluation.cases import Case, Expectation
from chatbot.evaluation.dry_run import CaseResult, ResultReport, Search, run_case
from chatbot.evaluation.scoring import ModelSummary, model_summary
from chatbot.ids import TenantId
from chatbot.models.prices import Price

Progress = Callable[[CaseResult], None]


class CaseReport(TypedDict):
    """One case of report.json `cases`: the question, what was expected, every model's result."""

    id: str
    question: str
    expect: Expectation | None
    reference: str | None
    """The recorded answer of a `--from-feedback` case, else None."""
    results: list[ResultReport]
    """One per model, in the order of report.json `models`."""


class Report(TypedDict):
    """report.json: one summary per model, then every case."""

    models: list[ModelSummary]
    cases: list[CaseReport]


"""Called after each (case, model) run, in completion order."""


async def evaluate(
    cases: Sequence[Case],
    candidates: Sequence[Candidate],
    *,
    tenant_id: TenantId,
    settings: Settings,
    search: Search,
    concurrency: int = 4,
    on_result: Progress | None = None,
    budgets: Budgets | None = None,
) -> list[CaseResult]:
    """Return the result of every case on every candidate, in case order then candidate order."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(case: Case, candidate: Candidate) -> CaseResult:
        async with gate:
            result = await run_case(
                case, candidate, tenant_id=tenant_id, settings=settings, search=search, budgets=budgets
            )
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(case, candidate) for case in cases for candidate in candidates)))


def build_report(
    cases: Sequence[Case], candidates: Sequence[Candidate], results: Sequence[CaseResult], prices: Mapping[str, Price]
) -> Report:
    """Return report.json: `models` (one summary per candidate), then `cases` with every model's result."""
    by_pair = {(r.case_id, r.model): r for r in results}
    models = [model_summary(c.name, cases, [by_pair[(case.id, c.name)] for case in cases], prices) for c in candidates]
    return {
        "models": models,
        "cases": [
            {
                "id": case.id,
                "question": case.question,
                "expect": case.expect,
                "reference": case.reference,
                "results": [by_pair[(case.id, c.name)].as_report() for c in candidates],
            }
            for case in cases
        ],
    }
