"""Old knowledge versions live as long as a retained run cites them; retention and erasure end that."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from chatbot.db.pool import make_pool
from chatbot.ids import TenantId, UserId
from chatbot.ops.erasure import erase_user
from chatbot.ops.retention import purge_stale_threads
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.versions import read_chunk_versions
from tests.fixtures.app import running_app, services_of
from tests.fixtures.postgres import settings_for
from tests.fixtures.retrieval_kb import write_docs
from tests.fixtures.tokens import auth

DOCS = {
    "travel.md": "# Travel\n\nMedical costs abroad are covered up to 50,000 euros.",
    "home.md": "# Home\n\nFire damage to the building is covered up to 9,000,000,000 rials.",
}


def age_superseded_versions(url: str) -> None:
    """Move every superseded version past the prune grace period (as if hours had passed)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("update kb_chunks set superseded_at = now() - interval '2 hours' where superseded_at is not null")


async def cited_version(client: Any, thread: str, user: str, question: str) -> tuple[str, int]:
    response = await client.post(
        f"/v1/threads/{thread}/runs",
        json={"message": {"content": question}},
        headers={"Accept": "application/json", **auth(user=user, locale="en-US")},
    )
    end = response.json()
    record = (await client.get(f"/v1/threads/{thread}/runs/{end['run_id']}", headers=auth(user=user))).json()
    [chunk] = [c for c in record["context"]["retrieved"] if c["chunk_id"] in end["citations"]]
    return chunk["chunk_id"], chunk["version"]


async def test_retention_and_erasure_prune_the_versions_only_their_threads_cited(
    isolated_database_url: str, tmp_path: Path
) -> None:
    url = isolated_database_url
    root = write_docs(tmp_path / "kb", DOCS)
    pool = make_pool(url, settings_for(url), name="t", min_size=1, max_size=4)
    await pool.open(wait=True)
    try:
        await ingest_paths(pool, TenantId("acme"), [root])
        async with running_app(url) as client:
            travel = await cited_version(client, "erased-user-thread", "leaving", "medical costs abroad covered up to?")
            home = await cited_version(client, "stale-thread", "staying", "fire damage to the building covered?")
            locks = services_of(client).locks
            for name, text in DOCS.items():
                (root / name).write_text(text.replace("covered", "now covered"), encoding="utf-8")
            await ingest_paths(pool, TenantId("acme"), [root])
            age_superseded_versions(url)
            # Nothing stale, nobody erased: both cited versions stay, whatever their age.
            await purge_stale_threads(pool, locks, datetime.now(UTC) - timedelta(days=1))
            assert len(await read_chunk_versions(pool, TenantId("acme"), [travel, home])) == 2
            await erase_user(pool, locks, TenantId("acme"), UserId("leaving"))
            assert list(await read_chunk_versions(pool, TenantId("acme"), [travel, home])) == [home]
            report = await purge_stale_threads(pool, locks, datetime.now(UTC) + timedelta(days=1))
            assert report.deleted == 1
            assert await read_chunk_versions(pool, TenantId("acme"), [travel, home]) == {}
    finally:
        await pool.close()
