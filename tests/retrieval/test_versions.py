"""Versioned knowledge: ingest supersedes chunks instead of rewriting them; search sees current ones."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.search import search_knowledge
from chatbot.retrieval.versions import prune_superseded_chunks, read_chunk_versions
from tests.fixtures.retrieval_kb import write_docs

OLD = "# Car body\n\n## Deductible\n\nYou pay 10% of each claim, at least 2,000,000 rials."
NEW = "# Car body\n\n## Deductible\n\nYou pay 15% of each claim, at least 3,000,000 rials."
OTHER = "# Travel\n\nMedical costs abroad are covered up to 50,000 euros."


def new_tenant() -> TenantId:
    return TenantId(f"t-{uuid.uuid4().hex[:10]}")


async def test_a_changed_document_keeps_the_old_version_readable_and_searches_the_new(
    pool: Pool, tmp_path: Path
) -> None:
    tenant = new_tenant()
    root = write_docs(tmp_path / "kb", {"car.md": OLD, "travel.md": OTHER})
    await ingest_paths(pool, tenant, [root])
    caller = CallerContext(TenantId(tenant), UserId("u1"), "en-US")
    old = (await search_knowledge(pool, caller, "car body deductible"))[0]
    assert "10%" in old.text and old.version == 1
    (root / "car.md").write_text(NEW, encoding="utf-8")
    await ingest_paths(pool, tenant, [root])
    new = (await search_knowledge(pool, caller, "car body deductible"))[0]
    assert "15%" in new.text and new.chunk_id != old.chunk_id and new.version == 2
    assert all("10%" not in c.text for c in await search_knowledge(pool, caller, "deductible claim rials"))
    rows = await read_chunk_versions(pool, tenant, [(old.chunk_id, old.version), (new.chunk_id, new.version)])
    assert rows[(old.chunk_id, 1)].text == old.text  # the text as a past run read it
    assert rows[(new.chunk_id, 2)].text == new.text
    assert await read_chunk_versions(pool, TenantId("another-tenant"), [(old.chunk_id, 1)]) == {}


async def test_a_removed_document_leaves_search_but_not_the_records_and_can_come_back(
    pool: Pool, tmp_path: Path
) -> None:
    tenant = new_tenant()
    caller = CallerContext(TenantId(tenant), UserId("u1"), "en-US")
    root = write_docs(tmp_path / "kb", {"car.md": OLD, "travel.md": OTHER})
    await ingest_paths(pool, tenant, [root])
    travel = (await search_knowledge(pool, caller, "medical costs abroad euros"))[0]
    (root / "travel.md").unlink()
    report = await ingest_paths(pool, tenant, [root])
    assert report.removed == 1
    assert await search_knowledge(pool, caller, "medical costs abroad euros") == []
    kept = await read_chunk_versions(pool, tenant, [(travel.chunk_id, travel.version)])
    assert kept[(travel.chunk_id, travel.version)].text == travel.text
    # Re-adding the same text makes it current again, as a new version of the same chunk id.
    write_docs(root, {"travel.md": OTHER})
    report = await ingest_paths(pool, tenant, [root])
    assert report.added == 1
    back = (await search_knowledge(pool, caller, "medical costs abroad euros"))[0]
    assert back.chunk_id == travel.chunk_id and back.version == travel.version + 1


async def test_unchanged_passages_keep_their_version_when_their_document_changes(pool: Pool, tmp_path: Path) -> None:
    tenant = new_tenant()
    caller = CallerContext(TenantId(tenant), UserId("u1"), "en-US")
    two_sections = OLD + "\n\n## Theft\n\nTheft of the whole car is covered after police reports it."
    root = write_docs(tmp_path / "kb", {"car.md": two_sections})
    await ingest_paths(pool, tenant, [root])
    theft = (await search_knowledge(pool, caller, "theft police"))[0]
    (root / "car.md").write_text(two_sections.replace("10%", "12%"), encoding="utf-8")
    report = await ingest_paths(pool, tenant, [root])
    assert report.chunks_written == 1  # only the edited section got a new row
    again = (await search_knowledge(pool, caller, "theft police"))[0]
    assert (again.chunk_id, again.version) == (theft.chunk_id, theft.version)


async def test_pruning_removes_superseded_versions_nobody_cites_after_the_grace_period(
    pool: Pool, tmp_path: Path
) -> None:
    tenant = new_tenant()
    caller = CallerContext(TenantId(tenant), UserId("u1"), "en-US")
    root = write_docs(tmp_path / "kb", {"car.md": OLD, "travel.md": OTHER})
    await ingest_paths(pool, tenant, [root])
    old = (await search_knowledge(pool, caller, "car body deductible"))[0]
    travel = (await search_knowledge(pool, caller, "medical costs abroad euros"))[0]
    (root / "car.md").write_text(NEW, encoding="utf-8")
    (root / "travel.md").unlink()
    await ingest_paths(pool, tenant, [root])
    await prune_superseded_chunks(pool)  # within the grace period: a run may still cite them
    refs = [(old.chunk_id, old.version), (travel.chunk_id, travel.version)]
    assert len(await read_chunk_versions(pool, tenant, refs)) == 2
    assert await prune_superseded_chunks(pool, grace=timedelta(0)) >= 2
    assert await read_chunk_versions(pool, tenant, refs) == {}
    current = (await search_knowledge(pool, caller, "car body deductible"))[0]
    assert "15%" in current.text  # current versions are never pruned
    async with pool.connection() as conn:
        cur = await conn.execute("select document_id from kb_documents where tenant_id = %s", (tenant,))
        assert [r["document_id"] for r in await cur.fetchall()] == ["car.md"]  # the removed one is gone
