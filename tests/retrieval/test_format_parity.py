"""Retrieval over PDF, DOCX and HTML finds what it finds over the same documents as Markdown.

The demo knowledge base's Markdown documents are rendered as shaped and legacy Persian PDFs,
right-to-left DOCX and web pages with boilerplate (tests/fixtures/corpus), each format ingested
into a tenant of its own through `chatbot ingest`'s path. Every question of the demo's own
evaluation that names the documents answering it is searched in each tenant: a question hits
when a chunk of an expected document is among the chunks a run would be given. Each format's
hit rate stays within 0.02 of the Markdown tenant's.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from chatbot.caller import CallerContext
from chatbot.db.pool import make_pool
from chatbot.documents.model import Document
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.search import search_knowledge
from tests.fixtures.corpus.render_docx import render_docx
from tests.fixtures.corpus.render_html import render_html
from tests.fixtures.corpus.render_pdf import legacy_pdf, shaped_pdf
from tests.fixtures.corpus.script import numbered_items_of
from tests.fixtures.corpus.source import DEMO, read_source
from tests.fixtures.postgres import settings_for

DEPTHS = (1, 5)  # the chunk the offline responder quotes, and the chunks a run is given


def _html(doc: Document, path: Path, source: Path) -> None:
    path.write_text(render_html(doc, numbered_items=numbered_items_of(source.read_text("utf-8"))), "utf-8")


def _docx(doc: Document, path: Path, source: Path) -> None:
    render_docx(doc, path, numbered_items=numbered_items_of(source.read_text("utf-8")))


RENDERERS: dict[str, tuple[str, Callable[[Document, Path, Path], object]]] = {
    "pdf-shaped": (".pdf", lambda doc, path, _: shaped_pdf(doc, path)),
    "pdf-legacy": (".pdf", lambda doc, path, _: legacy_pdf(doc, path)),
    "docx": (".docx", _docx),
    "html": (".html", _html),
}


def _cases() -> list[tuple[str, str, set[str]]]:
    cases = []
    for line in (DEMO / "eval.jsonl").read_text("utf-8").splitlines():
        case = json.loads(line)
        expect = case.get("expect") or {}
        if expect.get("status") == "answered" and expect.get("citations") and not case.get("history"):
            stems = {c.split("#")[0].rsplit(".", 1)[0] for c in expect["citations"]}
            cases.append((case["question"], case["locale"], stems))
    return cases


async def _ingest_every_format(database_url: str, root: Path) -> None:
    sources = sorted(DEMO.glob("*/*.md"))
    folders = {"markdown": root / "markdown"}
    for source in sources:
        target = folders["markdown"] / source.parent.name / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    for name, (suffix, render) in RENDERERS.items():
        folders[name] = root / name
        for source in sources:
            target = folders[name] / source.parent.name / f"{source.stem}{suffix}"
            target.parent.mkdir(parents=True, exist_ok=True)
            render(read_source(source), target, source)
    pool = make_pool(database_url, settings_for(database_url), name="kb", min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        for name, folder in folders.items():
            report = await ingest_paths(pool, TenantId(name), [folder])
            assert not report.skipped and report.added == len(sources), (name, report.counts())
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def hit_rates(migrated_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], float]:
    asyncio.run(_ingest_every_format(migrated_database_url, tmp_path_factory.mktemp("formats")))

    async def rates() -> dict[tuple[str, int], float]:
        cases = _cases()
        pool = make_pool(
            migrated_database_url, settings_for(migrated_database_url), name="search", min_size=1, max_size=2
        )
        await pool.open(wait=True)
        found: dict[tuple[str, int], float] = {}
        try:
            for tenant in ["markdown", *RENDERERS]:
                hits = dict.fromkeys(DEPTHS, 0)
                for question, locale, stems in cases:
                    caller = CallerContext(TenantId(tenant), UserId("parity"), locale)
                    chunks = await search_knowledge(pool, caller, question, k=max(DEPTHS))
                    for depth in DEPTHS:
                        hits[depth] += any(c.document_id.rsplit(".", 1)[0] in stems for c in chunks[:depth])
                found.update({(tenant, depth): hits[depth] / len(cases) for depth in DEPTHS})
        finally:
            await pool.close()
        return found

    return asyncio.run(rates())


def test_the_questions_are_enough_to_tell_formats_apart() -> None:
    assert len(_cases()) >= 40


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("name", list(RENDERERS))
def test_retrieval_over_a_format_is_within_two_points_of_markdown(
    hit_rates: dict[tuple[str, int], float], name: str, depth: int
) -> None:
    assert hit_rates["markdown", depth] >= 0.9, hit_rates
    assert abs(hit_rates[name, depth] - hit_rates["markdown", depth]) <= 0.02, hit_rates
