"""`chatbot eval`: compare models on labelled cases (`--dataset`) or on rated runs (`--from-feedback`).

Writes DIR/report.json and DIR/report.md (docs/api.md describes both); `--fail-under
METRIC=VALUE` makes the exit status a CI gate. Nothing is written to the service's tables:
every case runs through a dry copy of the graph (chatbot/evaluation/dry_run.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from chatbot.cli import common
from chatbot.config import Settings
from chatbot.evaluation.scoring import NUMERIC_METRICS, ModelSummary, NumericMetric
from chatbot.ids import TenantId
from chatbot.threads.export import parse_since

if TYPE_CHECKING:
    from chatbot.db.pool import Pool
    from chatbot.evaluation.candidates import Candidate
    from chatbot.evaluation.cases import Case
    from chatbot.evaluation.dry_run import CaseResult
    from chatbot.evaluation.runner import Report
    from chatbot.models.prices import Price
    from chatbot.retrieval.retriever import KnowledgeRetriever

Threshold = tuple[NumericMetric, float]


def parse_threshold(raw: str) -> Threshold:
    """Return (metric, value) of a `--fail-under METRIC=VALUE`; exit 2 naming what is wrong."""
    name, sep, value = raw.partition("=")
    metric = next((m for m in NUMERIC_METRICS if m == name.strip()), None)
    if not sep or metric is None:
        common.fail(f"--fail-under {raw!r}: the metric must be one of {', '.join(NUMERIC_METRICS)} (METRIC=VALUE)", 2)
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        common.fail(f"--fail-under {raw!r}: {value.strip()!r} is not a number", 2)
    return metric, number


def misses(models: Sequence[ModelSummary], thresholds: Sequence[Threshold]) -> list[str]:
    """Return one line per (model, metric) under its threshold; a metric with no value (null) misses too."""
    lines = []
    for model in models:
        for metric, bound in thresholds:
            value = model.get(metric)
            if value is None or value < bound:
                shown = "null" if value is None else value
                lines.append(f"{model['model']}: {metric} = {shown} is under {bound:g}")
    return lines


@contextmanager
def progress_bar(total: int) -> Iterator[Callable[[CaseResult], None]]:
    """Yield the per-result callback: a progress bar on a terminal (standard error), nothing otherwise."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda _: None
        return
    columns = (TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("eval", total=total)
        yield lambda _: bar.advance(task)


REPORT_FILES = ("report.json", "report.md")


def check_out(out: Path) -> None:
    """Check that `--out` can become the reports' folder, before any case runs; exit 2 naming what is wrong.

    Nothing is created here: a run refused later (an unknown tenant, no rated runs) leaves no folder.
    """
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        common.fail(f"--out {out}: {existing} is a file, not a folder for the reports", 2)
    if not os.access(existing, os.W_OK | os.X_OK):
        common.fail(f"--out {out}: the folder cannot be written to", 2)
    for name in REPORT_FILES:
        target = out / name
        if target.exists() and (not target.is_file() or not os.access(target, os.W_OK)):
            common.fail(f"--out {out}: {name} is there and cannot be replaced", 2)


def _search(pool: Pool, settings: Settings) -> KnowledgeRetriever:
    """Return a replica's retrieval (services.py): bounded like it, as many candidates as it keeps."""
    from chatbot.models.offline import OFFLINE_CANDIDATES
    from chatbot.retrieval.embeddings import load_embeddings
    from chatbot.retrieval.retriever import KnowledgeRetriever

    return KnowledgeRetriever(
        pool,
        settings.model_first_token_timeout_seconds,
        embeddings=load_embeddings(settings.embeddings),
        k=OFFLINE_CANDIDATES,
    )


def _moment(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        common.fail(f"{option}: {exc}: give a date as YYYY-MM-DD, or an ISO datetime.", 2)
        raise  # unreachable: fail exits


def evaluate_command(
    model: list[str] = typer.Option(..., "--model", help="A model spec, as CHATBOT_MODEL takes it; repeat to compare."),
    tenant: str = typer.Option(..., "--tenant", help="Tenant whose knowledge base answers.", callback=common.caller_id),
    out: Path = typer.Option(..., "--out", help="Folder for report.json and report.md (created if missing)."),
    dataset: Path | None = typer.Option(None, "--dataset", help="JSON Lines file of cases (docs/api.md)."),
    from_feedback: bool = typer.Option(False, "--from-feedback", help="Build the cases from the tenant's rated runs."),
    since: str | None = typer.Option(None, "--since", help="With --from-feedback: rated at or after this date."),
    until: str | None = typer.Option(None, "--until", help="With --from-feedback: rated before this date."),
    score: str | None = typer.Option(None, "--score", help="With --from-feedback: only runs rated up, or down."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, max=64, help="Cases run at once."),
    fail_under: list[str] = typer.Option([], "--fail-under", help="METRIC=VALUE: exit 1 when a model is under it."),
    charge_tenant: bool = typer.Option(
        False, "--charge-tenant", help="Count the cases' model calls against the tenant's budgets (user `eval`)."
    ),
) -> None:
    """Run every case through the whole graph once per model; write report.json and report.md.

    Nothing is written to the service's tables: no thread, no memory, no usage totals, and
    nothing is counted against the tenant's budgets unless --charge-tenant.
    """
    # Imported here: the graph and the model packages are heavy, and every other command loads this module.
    from chatbot.evaluation.candidates import load_candidate
    from chatbot.evaluation.cases import DatasetError, load_dataset
    from chatbot.evaluation.markdown import render_markdown
    from chatbot.evaluation.replayed import Score, rated_cases
    from chatbot.models.chain import ModelConfigError
    from chatbot.models.prices import PricesError, parse_prices

    thresholds = [parse_threshold(raw) for raw in fail_under]
    if (dataset is None) == (not from_feedback):
        common.fail("give either --dataset FILE or --from-feedback --since DATE", 2)
    if from_feedback and since is None:
        common.fail("--from-feedback needs --since DATE", 2)
    if not from_feedback and (since or until or score):
        common.fail("--since, --until and --score go with --from-feedback", 2)
    if score not in (None, "up", "down"):
        common.fail("--score must be up or down", 2)
    first, last = _moment(since, "--since"), _moment(until, "--until")
    settings = common.load_settings(environment="dev")  # needs no token key
    try:
        prices = parse_prices(settings.model_prices)
        candidates = [load_candidate(spec, settings) for spec in model]
    except (PricesError, ModelConfigError) as exc:
        common.fail(str(exc), 2)
        return
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        common.fail("each --model must be a different model", 2)
    cases: list[Case] = []
    if dataset is not None:
        try:
            cases = load_dataset(dataset)
        except DatasetError as exc:
            common.fail(str(exc), 2)
    check_out(out)
    tenant_id = TenantId(tenant)

    async def _go() -> Report:
        from chatbot.retrieval.ingest import document_count

        async with common.open_pool_and_locks(settings) as (pool, locks):
            if not await document_count(pool, tenant_id):
                # A mistyped tenant would otherwise run every case against nothing and exit 0.
                common.fail(
                    f"tenant {tenant} has no knowledge base: check --tenant, "
                    f"or load one with chatbot ingest --tenant {tenant} PATH.",
                    2,
                )
            found = cases
            if from_feedback:
                assert first is not None
                rated: Score | None = "up" if score == "up" else "down" if score == "down" else None
                found = await rated_cases(pool, locks, tenant_id=tenant_id, since=first, until=last, score=rated)
                if not found:
                    common.fail(f"no rated runs of tenant {tenant} in that period", 2)
            if not charge_tenant:
                return await _run(found, candidates, tenant_id, settings, pool, concurrency, prices)
            from chatbot.agent.modelcall import answer_input_bound
            from chatbot.budgets.service import Budgets

            specs = [entry.spec for c in candidates for entry in c.chain]
            budgets = Budgets(
                pool,
                prices=dict(prices),
                output_cap=settings.model_max_output_tokens,
                reservation_seconds=settings.budget_reservation_seconds,
                answer_input_bound=max((answer_input_bound(s, settings.context_tokens) for s in specs), default=0),
            )
            try:
                with common.stopped_by_sigterm():
                    return await _run(found, candidates, tenant_id, settings, pool, concurrency, prices, budgets)
            finally:
                # Interrupted (Ctrl-C, SIGTERM): each case settled its hold on the way out;
                # whatever could not be is released here, before the pool closes.
                await budgets.close()

    try:
        report = common.run(_go())
    except (KeyboardInterrupt, asyncio.CancelledError):
        common.fail("interrupted: nothing written; the tenant's budget holds were given back", 130)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_markdown(report), encoding="utf-8")
    for entry in report["models"]:
        figures = " ".join(f"{k}={'null' if entry[k] is None else entry[k]}" for k in NUMERIC_METRICS)
        typer.echo(f"{entry['model']}: {figures}")
    typer.echo(f"report: {out / 'report.json'}, {out / 'report.md'}")
    missed = misses(report["models"], thresholds)
    if missed:
        for line in missed:
            typer.echo(f"fail-under: {line}", err=True)
        raise typer.Exit(1)


async def _run(
    cases: Sequence[Case],
    candidates: Sequence[Candidate],
    tenant_id: TenantId,
    settings: Settings,
    pool: Any,
    concurrency: int,
    prices: Mapping[str, Price],
    budgets: Any = None,
) -> Report:
    from chatbot.evaluation.runner import build_report, evaluate

    with progress_bar(len(cases) * len(candidates)) as advance:
        results = await evaluate(
            cases,
            candidates,
            tenant_id=tenant_id,
            settings=settings,
            search=_search(pool, settings),
            concurrency=concurrency,
            on_result=advance,
            budgets=budgets,
        )
    return build_report(cases, candidates, results, prices)
