"""Chunk versions as run records cite them: read them back, prune those nobody cites.

A run record (agent/record.py) keeps the (chunk id, version) pairs it retrieved, in the
`record` channel, a JSON string the checkpointer stores inline in each checkpoint's JSONB.
Postgres can therefore tell which superseded versions a retained thread still refers to
without loading any blob (the statement on the checkpoints is db/langgraph_tables.py's).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from chatbot.db.langgraph_tables import CITED_CHUNK_VERSIONS
from chatbot.db.pool import Pool

# Longer than any run: a run that retrieved a chunk just before an ingest superseded it
# writes its record only when it ends, so a younger superseded version may be cited yet.
PRUNE_GRACE = timedelta(hours=1)

_READ = """
select c.chunk_id, c.version, c.document_id, c.title, c.text
from kb_chunks c
join unnest(%s::text[], %s::int[]) as wanted(chunk_id, version)
  on c.chunk_id = wanted.chunk_id and c.version = wanted.version
where c.tenant_id = %s
"""

_ANY_PRUNABLE = "select 1 from kb_chunks where superseded_at is not null and superseded_at < now() - %s limit 1"

# One pass over the root checkpoints collects every cited pair, in the delete's own statement.
_PRUNE = f"""
with cited as materialized ({CITED_CHUNK_VERSIONS})
delete from kb_chunks c
where c.superseded_at is not null and c.superseded_at < now() - %s
  and not exists (
    select 1 from cited
    where cited.tenant_id = c.tenant_id and cited.chunk_id = c.chunk_id and cited.version = c.version
  )
"""

_DROP_EMPTY_DOCUMENTS = """
delete from kb_documents d
where d.removed_at is not null
  and not exists (select 1 from kb_chunks c where c.tenant_id = d.tenant_id and c.document_id = d.document_id)
"""


async def read_chunk_versions(
    pool: Pool, tenant_id: str, refs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Return the tenant's chunk rows for (chunk id, version) pairs, current or superseded."""
    if not refs:
        return {}
    async with pool.connection() as conn:
        cur = await conn.execute(_READ, ([r[0] for r in refs], [int(r[1]) for r in refs], tenant_id))
        rows = await cur.fetchall()
    return {(row["chunk_id"], int(row["version"])): dict(row) for row in rows}


async def prune_superseded_chunks(pool: Pool, *, grace: timedelta = PRUNE_GRACE) -> int:
    """Delete superseded chunk versions no retained run record cites; return how many went.

    Removed documents left without any chunk version go too. Cheap when nothing is
    superseded; otherwise one scan of the root checkpoints (run it with retention and
    erasure, not per request).
    """
    async with pool.connection() as conn:
        if await (await conn.execute(_ANY_PRUNABLE, (grace,))).fetchone() is None:
            return 0
        async with conn.transaction():
            deleted = (await conn.execute(_PRUNE, (grace,))).rowcount
            await conn.execute(_DROP_EMPTY_DOCUMENTS)
    return max(deleted, 0)
