"""report.md: a table per model, then the cases where the models disagree.

Persian text is wrapped in Unicode directional isolates, RLI (U+2067) ... PDI (U+2069):
a viewer that follows the bidirectional algorithm shows it right to left, whatever the
surrounding table's direction, and the isolate keeps its punctuation and digits from
reordering the cells around it. The file stays plain text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chatbot.evaluation.scoring import ModelSummary, Percentiles, cites_expected
from chatbot.text import cut_at_word, looks_persian

if TYPE_CHECKING:
    from chatbot.evaluation.cases import Expectation
    from chatbot.evaluation.dry_run import ResultReport
    from chatbot.evaluation.runner import CaseReport, Report

RLI, PDI = "\u2067", "\u2069"
CELL_CHARS = 160


def bidi(text: str) -> str:
    """Return `text` isolated right to left when it is written in Persian, else as it is."""
    return f"{RLI}{text}{PDI}" if looks_persian(text) else text


def cell(value: Any, limit: int = CELL_CHARS) -> str:
    """Return a value as one Markdown table cell: one line, pipes escaped, long text cut, Persian isolated."""
    if value is None:
        return "–"
    text = " ".join(str(value).split())
    text = cut_at_word(text, limit, min_keep=limit // 2, marker="…")
    return bidi(text.replace("|", "\\|"))


def _figure(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".")


def _cost(value: float | None) -> str:
    return "–" if value is None else f"{value:.6f}"


def _pair(value: Percentiles) -> str:
    return f"{_figure(value['p50'], 1)} / {_figure(value['p95'], 1)}"


def _summary_table(models: Sequence[ModelSummary]) -> list[str]:
    lines = [
        "| model | cases | status accuracy | citation hit rate | failed | incomplete "
        "| latency p50 / p95 ms | first token p50 / p95 ms | tokens in / out / cached | cost USD |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in models:
        tokens = m["tokens"]
        lines.append(
            f"| {cell(m['model'])} | {m['cases']} "
            f"| {_figure(m['status_accuracy'])} | {_figure(m['citation_hit_rate'])} "
            f"| {m['failed']} | {m['incomplete']} | {_pair(m['latency_ms'])} | {_pair(m['ttft_ms'])} "
            f"| {tokens['input']} / {tokens['output']} / {tokens['cached_input']} "
            f"| {_cost(m['cost_usd'])} |"
        )
    return lines


def _expected(expect: Expectation | None) -> str:
    """Return the expected status and citations as one line (empty when the case expects nothing)."""
    if expect is None:
        return ""
    return " ".join(filter(None, [expect.get("status"), *expect.get("citations", [])]))


def _verdict(case: CaseReport, result: ResultReport) -> str:
    expect = case["expect"]
    if expect is None:
        return "–"
    marks = []
    if expect.get("status"):
        marks.append("status ✓" if result["status"] == expect["status"] else "status ✗")
    if expect.get("citations"):
        marks.append("cited ✓" if cites_expected(result["citations"], expect["citations"]) else "cited ✗")
    return ", ".join(marks) or "–"


def _model_table(index: int, model: str, cases: Sequence[CaseReport]) -> list[str]:
    lines = [
        f"## {cell(model)}",
        "",
        "| case | question | expected | status | citations | check | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        result = case["results"][index]
        expected = _expected(case["expect"]) or None
        lines.append(
            f"| {cell(case['id'])} | {cell(case['question'], 80)} | {cell(expected)} | {result['status']} "
            f"| {cell(' '.join(result['citations']) or None)} | {_verdict(case, result)} | {cell(result['error'])} |"
        )
    return lines


def _disagree(case: CaseReport) -> bool:
    results = case["results"]
    return len({(r["status"], tuple(sorted(r["citations"]))) for r in results}) > 1


def _case_block(case: CaseReport) -> list[str]:
    lines = [f"### {cell(case['id'])}", "", f"Question: {cell(case['question'], 600)}", ""]
    if case["expect"]:
        lines += [f"Expected: {cell(_expected(case['expect']))}", ""]
    lines += ["| model | status | citations | answer |", "|---|---|---|---|"]
    if case["reference"] is not None:
        lines.append(f"| (recorded) | – | – | {cell(case['reference'], 300)} |")
    for r in case["results"]:
        answer = r["answer"] if r["error"] is None else f"error: {r['error']}"
        lines.append(
            f"| {cell(r['model'])} | {r['status']} | {cell(' '.join(r['citations']) or None)} | {cell(answer, 300)} |"
        )
    return [*lines, ""]


def render_markdown(report: Report) -> str:
    """Return report.md for a report.json object."""
    models, cases = report["models"], report["cases"]
    lines = ["# Evaluation report", "", f"{len(cases)} cases, {len(models)} model(s).", "", *_summary_table(models), ""]
    for index, model in enumerate(models):
        lines += [*_model_table(index, model["model"], cases), ""]
    replayed = [c for c in cases if c["reference"] is not None]
    if replayed:
        lines += ["## Recorded answers beside the new ones", ""]
        for case in replayed:
            lines += _case_block(case)
    disagreeing = [c for c in cases if c["reference"] is None and _disagree(c)]
    lines += ["## Cases where the models disagree", ""]
    if len(models) < 2:
        lines += ["One model: nothing to compare.", ""]
    elif not disagreeing:
        lines += ["None: every model gave the same status and citations.", ""]
    for case in disagreeing:
        lines += _case_block(case)
    return "\n".join(lines).rstrip() + "\n"
