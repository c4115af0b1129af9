"""Deleting threads: everything kept of a thread, in every table keyed by its id.

A thread's checkpoints, blobs and writes go through the saver's own `adelete_thread`
(db/langgraph_tables.py); then every other table the catalogue shows with a `thread_id`
column (feedback, the thread's lock fence, and whatever a later library version or
migration adds) loses the thread's rows, in the same transaction. Callers hold the threads'
locks, so no run writes meanwhile (threads/transcript_router.py, ops/).

Unknown tables are cleaned rather than refused: in this database a `thread_id` can only
name one of the backend's chat sessions (there is no mapping table; DESIGN.md), so its rows
are the thread's, and deletion, retention and erasure promise that nothing of the thread is
left. Refusing instead would turn a library upgrade into failing erasures in production.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from chatbot.db import catalogue, langgraph_tables
from chatbot.db.pool import Pool


async def delete_thread_rows(conn: AsyncConnection[Any], thread_ids: Sequence[str]) -> None:
    """Delete every row of the threads, on `conn` (in the caller's transaction)."""
    if not thread_ids:
        return
    await langgraph_tables.delete_thread_checkpoints(conn, thread_ids)
    await catalogue.delete_keyed(conn, "thread_id", thread_ids, skip=langgraph_tables.CHECKPOINT_TABLES)


async def delete_threads(pool: Pool, thread_ids: Sequence[str]) -> int:
    """Delete every checkpoint, blob and write of the threads, their feedback, everything, at once."""
    if not thread_ids:
        return 0
    ids = list(thread_ids)
    async with pool.connection() as conn, conn.transaction():
        await delete_thread_rows(conn, ids)
    return len(ids)
