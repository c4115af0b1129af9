"""Ingestion is idempotent: unchanged documents keep their chunks, changes and deletions land."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.search import search_knowledge
from tests.fixtures.retrieval_kb import chunk_ids, write_docs

DOCS = {
    "car/body.md": (
        "# Car body\n\n## Cover\n\nCollision and theft are covered.\n\n## Deductible\n\nYou pay 10% of each claim."
    ),
    "travel.markdown": "# Travel\n\nMedical costs abroad up to 50,000 euros.",
    "notes/home.txt": "Home insurance covers fire, lightning and explosion.",
    "fa/laghv.md": "# لغو\n\nبرای لغو بیمه‌نامه بدنه درخواست را در اپلیکیشن ثبت کنید.",
    "ignored.pdf": "not a PDF: named one, but text",
}


def new_tenant() -> TenantId:
    return TenantId(f"t-{uuid.uuid4().hex[:10]}")


async def documents(pool: Pool, tenant: str) -> dict[str, str]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT document_id, language FROM kb_documents WHERE tenant_id = %s AND removed_at IS NULL", (tenant,)
        )
        return {row["document_id"]: row["language"] for row in await cur.fetchall()}


async def test_first_ingest_adds_every_supported_file(pool: Pool, tmp_path: Path) -> None:
    tenant = new_tenant()
    seen: list[tuple[int, int]] = []
    report = await ingest_paths(
        pool, tenant, [write_docs(tmp_path / "kb", DOCS)], progress=lambda done, total: seen.append((done, total))
    )
    assert (report.added, report.updated, report.unchanged, report.removed) == (4, 0, 0, 0)
    # A file that is not taken is counted as skipped, with its reason, never left out in silence.
    assert [(s.path.name, s.reason) for s in report.skipped] == [("ignored.pdf", "corrupt")]
    assert await documents(pool, tenant) == {
        "car/body.md": "en",
        "travel.markdown": "en",
        "notes/home.txt": "en",
        "fa/laghv.md": "fa",
    }
    assert seen[-1] == (5, 5)


async def test_reingest_is_idempotent(pool: Pool, tmp_path: Path) -> None:
    tenant = new_tenant()
    root = write_docs(tmp_path / "kb", DOCS)
    await ingest_paths(pool, tenant, [root])
    before = await chunk_ids(pool, tenant)
    report = await ingest_paths(pool, tenant, [root])
    assert (report.added, report.updated, report.unchanged, report.removed) == (0, 0, 4, 0)
    after = await chunk_ids(pool, tenant)
    assert after == before
    assert len(after) == len(set(after))


async def test_a_changed_document_is_updated_and_keeps_unchanged_chunk_ids(pool: Pool, tmp_path: Path) -> None:
    tenant = new_tenant()
    root = write_docs(tmp_path / "kb", DOCS)
    await ingest_paths(pool, tenant, [root])
    before = await chunk_ids(pool, tenant, "car/body.md")
    changed = DOCS["car/body.md"].replace("You pay 10% of each claim.", "You pay 15% of each claim.")
    (root / "car/body.md").write_text(changed, encoding="utf-8")
    report = await ingest_paths(pool, tenant, [root])
    assert (report.added, report.updated, report.unchanged, report.removed) == (0, 1, 3, 0)
    after = await chunk_ids(pool, tenant, "car/body.md")
    assert len(after) == len(before)
    assert len(set(before) & set(after)) == len(before) - 1  # only the edited section got a new id
    ctx = CallerContext(TenantId(tenant), UserId("user-1"), "en-US")
    found = await search_knowledge(pool, ctx, "car body deductible")
    assert "15%" in found[0].text


async def test_a_deleted_file_is_removed_with_its_chunks(pool: Pool, tmp_path: Path) -> None:
    tenant = new_tenant()
    root = write_docs(tmp_path / "kb", DOCS)
    await ingest_paths(pool, tenant, [root])
    (root / "travel.markdown").unlink()
    report = await ingest_paths(pool, tenant, [root])
    assert (report.added, report.updated, report.unchanged, report.removed) == (0, 0, 3, 1)
    assert "travel.markdown" not in await documents(pool, tenant)
    assert await chunk_ids(pool, tenant, "travel.markdown") == []
    ctx = CallerContext(TenantId(tenant), UserId("user-1"), "en-US")
    assert await search_knowledge(pool, ctx, "medical costs abroad euros") == []


async def test_single_files_are_ingested_by_name_and_never_pruned(pool: Pool, tmp_path: Path) -> None:
    tenant = new_tenant()
    root = write_docs(tmp_path / "kb", DOCS)
    await ingest_paths(pool, tenant, [root / "travel.markdown"])
    await ingest_paths(pool, tenant, [root / "notes" / "home.txt"])
    assert set(await documents(pool, tenant)) == {"travel.markdown", "home.txt"}


async def test_ingest_rejects_bad_tenants_and_missing_paths(pool: Pool, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        await ingest_paths(pool, TenantId("bad.tenant"), [tmp_path])
    with pytest.raises(FileNotFoundError):
        await ingest_paths(pool, new_tenant(), [tmp_path / "missing"])


# Characters the Markdown splitter used to drop (or, for U+2058, turn into a ZWNJ): invisible
# format characters inside words, separators and odd spaces between words.
HIDDEN_BODY = (
    "The Quor\u200dvane rider pays 7\u00a0431 credits\u2028for kelp\u2029damage to moored\u0085house\ufeffboats,"
    "\tnever \u202eflipped\u202c or \u2068isolated\u2069 \u200fwords\u200e, soft\u00adhyphens, four\u2058dots "
    "and می\u200cتوانید."
)
HIDDEN_DOC = f"# Quorvane rider\n\n\u200f## Kelp\u200d cover\n\n{HIDDEN_BODY}\n"


async def test_chunks_keep_the_text_as_written_and_search_reads_it_normalised(pool: Pool, tmp_path: Path) -> None:
    # Answers quote chunks as written (the contract): ingest used to drop U+2028/2029/0085,
    # joiners, byte-order marks, bidi controls, tabs and no-break spaces, and to turn U+2058
    # into a zero-width non-joiner (docs/measurements/reliability.md).
    tenant = new_tenant()
    await ingest_paths(pool, tenant, [write_docs(tmp_path / "kb", {"rider.md": HIDDEN_DOC})])
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT title, text FROM kb_chunks WHERE tenant_id = %s", (tenant,))
        rows = [(row["title"], row["text"]) for row in await cur.fetchall()]
    # The heading after a right-to-left mark is still a heading; its joiner is kept.
    assert rows == [("Quorvane rider › Kelp\u200d cover", HIDDEN_BODY)]
    ctx = CallerContext(TenantId(tenant), UserId("user-1"), "en-US")
    # Searched without the invisible characters, and with separators between the words.
    for query in ("Quorvane kelp damage", "houseboats moored credits", "isolated flipped words"):
        found = await search_knowledge(pool, ctx, query)
        assert found and found[0].text == HIDDEN_BODY, query
