"""Ingest takes what a reader returns, keeps its pages, and leaves a failing file's document as it was.

The files here are read by the real sniffing, worker and limits; the PDF "reader" is a double
that returns the Document the test described (tests/fixtures/document_readers.py), or one that
crashes, so these hold before and whatever the real readers are.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.documents.model import Document, Paragraph, ReadLimits, Section, Table
from chatbot.documents.reader import DocumentReader
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import SkippedFile, ingest_paths
from chatbot.retrieval.search import search_knowledge
from tests.fixtures.document_readers import ABORTS, DESCRIBED, write_described
from tests.fixtures.retrieval_kb import chunk_ids, write_docs

WORDING = Document(
    "Quorvane policy wording",
    "en",
    (
        Section(
            ("Quorvane policy wording", "Glass"),
            (Paragraph("Quorvane glass breakage is covered with no deductible.", (4,)),),
        ),
        Section(
            ("Quorvane policy wording", "Limits"),
            (Table(("Cover", "Limit"), (("Kelp damage", "7,431 credits"),), (5, 6)),),
        ),
    ),
    paged=True,
)


def _tenant() -> TenantId:
    return TenantId(f"t-{uuid.uuid4().hex[:10]}")


def _reader(pdf: str = DESCRIBED) -> DocumentReader:
    return DocumentReader(ReadLimits(seconds=30), memory_bytes=512 * 1024**2, readers={"pdf": pdf})


async def _rows(pool: Pool, tenant: str, document_id: str) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT chunk_id, version, title, text, metadata->'pages' AS pages, superseded_at IS NULL AS current"
            " FROM kb_chunks WHERE tenant_id = %s AND document_id = %s ORDER BY version, ordinal",
            (tenant, document_id),
        )
        return list(await cur.fetchall())


async def test_a_paged_document_is_stored_with_its_titles_rows_and_pages(pool: Pool, tmp_path: Path) -> None:
    tenant = _tenant()
    root = tmp_path / "kb"
    write_described(root / "wording.pdf", WORDING)
    write_docs(root, {"notes.md": "# Notes\n\nQuorvane notes without pages."})
    pages: list[int] = []
    with _reader() as reader:
        report = await ingest_paths(pool, tenant, [root], reader=reader, pages_read=pages.append)
    assert (report.added, report.skipped, report.pages, pages) == (2, [], 6, [6])
    rows = await _rows(pool, tenant, "wording.pdf")
    assert [(r["title"], r["text"], r["pages"]) for r in rows] == [
        ("Quorvane policy wording › Glass", "Quorvane glass breakage is covered with no deductible.", [4]),
        ("Quorvane policy wording › Limits", "Cover: Kelp damage; Limit: 7,431 credits", [5, 6]),
    ]
    assert [r["pages"] for r in await _rows(pool, tenant, "notes.md")] == [None]
    found = await search_knowledge(pool, CallerContext(TenantId(tenant), UserId("u1"), "en-US"), "kelp damage limit")
    assert found and found[0].text == "Cover: Kelp damage; Limit: 7,431 credits"


async def test_an_unchanged_file_is_not_read_again_and_moved_pages_make_a_new_version(
    pool: Pool, tmp_path: Path
) -> None:
    tenant = _tenant()
    path = write_described(tmp_path / "kb" / "wording.pdf", WORDING)
    with _reader() as reader:
        await ingest_paths(pool, tenant, [tmp_path / "kb"], reader=reader)
    # Unchanged bytes: counted unchanged by their fingerprint, even by a reader that would crash.
    with _reader(ABORTS) as crashing:
        report = await ingest_paths(pool, tenant, [tmp_path / "kb"], reader=crashing)
    assert (report.unchanged, report.skipped) == (1, [])
    # A page inserted before the glass clause: same text, new pages, so a new version of it.
    clause = "Quorvane glass breakage is covered with no deductible."
    glass = Section(WORDING.sections[0].headings, (Paragraph(clause, (5,)),))
    moved = Document(WORDING.title, WORDING.language, (glass, *WORDING.sections[1:]), paged=True)
    write_described(path, moved)
    with _reader() as reader:
        report = await ingest_paths(pool, tenant, [tmp_path / "kb"], reader=reader)
    assert report.updated == 1
    current = [(r["pages"], r["version"]) for r in await _rows(pool, tenant, "wording.pdf") if r["current"]]
    assert current == [([5, 6], 1), ([5], 2)]


async def test_a_file_that_fails_keeps_its_previous_version_current_and_is_not_removed(
    pool: Pool, tmp_path: Path
) -> None:
    tenant = _tenant()
    root = tmp_path / "kb"
    path = write_described(root / "wording.pdf", WORDING)
    with _reader() as reader:
        await ingest_paths(pool, tenant, [root], reader=reader)
    before = await _rows(pool, tenant, "wording.pdf")
    # A new version of the file, whose reading crashes the reader's process.
    write_described(path, Document("Changed", "en", (Section((), (Paragraph("New text.", (1,)),)),), paged=True))
    seen: list[SkippedFile] = []
    with _reader(ABORTS) as crashing:
        report = await ingest_paths(pool, tenant, [root], reader=crashing, on_skip=seen.append)
    assert [(s.path.name, s.reason) for s in report.skipped] == [("wording.pdf", "crashed")]
    assert seen == report.skipped
    assert seen[0].line().startswith(f"skipped {root / 'wording.pdf'}: crashed (")
    assert (report.added, report.updated, report.removed, report.chunks_written) == (0, 0, 0, 0)
    assert await _rows(pool, tenant, "wording.pdf") == before  # nothing half-written, nothing superseded
    # The file is still there: its document is neither removed nor changed, and stays found.
    found = await search_knowledge(pool, CallerContext(TenantId(tenant), UserId("u1"), "en-US"), "quorvane glass")
    assert found and found[0].document_id == "wording.pdf"


async def test_a_folder_with_files_that_cannot_be_taken_ingests_the_rest(pool: Pool, tmp_path: Path) -> None:
    tenant = _tenant()
    root = write_docs(tmp_path / "kb", {"a.md": "# A\n\nAlpha.", "data.csv": "a,b\n1,2\n"})
    (root / "photo.pdf").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    (root / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    write_docs(root, {"eval/cases.jsonl": "{}\n", ".ingestignore": "# the eval set\neval/*.jsonl\n"})
    report = await ingest_paths(pool, tenant, [root])
    assert report.added == 1 and await chunk_ids(pool, tenant, "a.md")
    # Hidden files and what .ingestignore lists are not walked; everything else not taken is
    # reported with its reason.
    assert sorted((s.path.name, s.reason) for s in report.skipped) == [
        ("data.csv", "unsupported"),
        ("photo.pdf", "unsupported"),
    ]
    assert report.counts().endswith("skipped=2")
