"""Chunk versions as run records cite them: read them back, prune those nobody cites.

A run record (agent/record.py) keeps the (chunk id, version) pairs it retrieved, in the
`record` channel, a JSON string the checkpointer stores inline in each checkpoint's JSONB.
Postgres can therefore tell which superseded versions a retained thread still refers to
without loading any blob (the statement on the checkpoints is db/langgraph_tables.py's).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from chatbot.db.pool import Pool
from chatbot.ids import TenantId
from chatbot.responses import QuotedChunk
from chatbot.retrieval import queries

# Longer than any run: a run that retrieved a chunk just before an ingest superseded it
# writes its record only when it ends, so a younger superseded version may be cited yet.
PRUNE_GRACE = timedelta(hours=1)


async def read_chunk_versions(
    pool: Pool, tenant_id: TenantId, refs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], QuotedChunk]:
    """Return the tenant's chunk versions for (chunk id, version) pairs, current or superseded."""
    if not refs:
        return {}
    async with pool.connection() as conn:
        rows = await queries.chunk_versions(conn, tenant_id, refs)
    return {(chunk.chunk_id, chunk.version): chunk for chunk in rows}


async def prune_superseded_chunks(pool: Pool, *, grace: timedelta = PRUNE_GRACE) -> int:
    """Delete superseded chunk versions no retained run record cites; return how many went.

    Removed documents left without any chunk version go too. Cheap when nothing is
    superseded; otherwise one scan of the root checkpoints (run it with retention and
    erasure, not per request).
    """
    async with pool.connection() as conn:
        if not await queries.any_prunable(conn, grace):
            return 0
        async with conn.transaction():
            deleted = await queries.prune_chunks(conn, grace)
            await queries.drop_empty_documents(conn)
    return max(deleted, 0)
