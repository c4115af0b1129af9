"""Section-level scoring of an evaluation: did the answer cite the section that answers?

The report's citation hit rate asks whether a cited chunk belongs to an expected
document; a responder that quotes one chunk can cite the right document and still answer
from the wrong part of it. Cases labelled with `expect.section` (a heading path as ingest
titles chunks, `Document › Heading`) are scored here by the title of the chunk cited
first, per language of the section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from chatbot.retrieval.ingest import section_titles
from chatbot.text import looks_persian, normalize_persian

if TYPE_CHECKING:
    from chatbot.evaluation.runner import Report


def knowledge_titles(paths: Sequence[Path]) -> dict[str, str]:
    """Return each chunk's heading path, by chunk id, for the knowledge files the eval ran on."""
    return section_titles(paths)


def cited_section(citations: Sequence[str], titles: Mapping[str, str]) -> str | None:
    """Return the heading path of the first cited chunk (None when nothing was cited or it is unknown)."""
    return titles.get(citations[0]) if citations else None


def section_hit_rates(report: Report, titles: Mapping[str, str]) -> dict[str, dict[str, float | None]]:
    """Return, per model of the report, the share of labelled cases answered from their section, by language."""
    rates: dict[str, dict[str, float | None]] = {}
    for position, entry in enumerate(report["models"]):
        counts: dict[str, list[int]] = {"en": [0, 0], "fa": [0, 0]}
        for case in report["cases"]:
            expect = case.get("expect")
            wanted = expect.get("section") if expect else None
            if not wanted:
                continue
            language = "fa" if looks_persian(wanted) else "en"
            cited = cited_section(case["results"][position]["citations"], titles)
            counts[language][1] += 1
            if cited is not None and _same(cited, wanted):
                counts[language][0] += 1
        rates[entry["model"]] = {
            language: round(hits / total, 4) if total else None for language, (hits, total) in counts.items()
        }
    return rates


def _same(title: str, wanted: str) -> bool:
    # One spelling: the demo's Persian files mix Arabic and Persian yeh.
    return normalize_persian(title).strip() == normalize_persian(wanted).strip()
