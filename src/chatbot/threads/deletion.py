"""Deleting threads: everything kept of a thread, in every table keyed by its id.

A thread's checkpoints, blobs and writes go through the saver's own `adelete_thread`
(db/langgraph_tables.py); then every other table the catalogue shows with a `thread_id`
column (feedback, the thread's lock fence, and whatever a later library version or
migration adds) loses the thread's rows, in the same transaction. Callers hold the threads'
locks, so no run writes meanwhile (threads/router.py, ops/).

Unknown tables are cleaned rather than refused: in this database a `thread_id` can only
name one of the backend's chat sessions (there is no mapping table), so its rows
are the thread's, and deletion, retention and erasure promise that nothing of the thread is
left. Refusing instead would turn a library upgrade into failing erasures in production.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from chatbot.db import catalogue, langgraph_tables
from chatbot.db.locks import Fence, forget_fence
from chatbot.db.pool import Pool
from chatbot.errors import DATABASE_ERRORS

log = logging.getLogger(__name__)


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


async def forget_unwritten_thread(pool: Pool, fence: Fence | None) -> None:
    """Delete the fence row a refused first run's lock set, the only row of a thread id never written.

    Called by the lock's holder before it releases the lock (threads/runs.py): the token
    condition makes sure only that holder's row goes. Best effort: when the database fails
    here too, the row stays until the thread id is used and deleted (what every refusal
    left before).
    """
    if fence is None:
        return
    try:
        async with pool.connection() as conn:
            await forget_fence(conn, fence.thread_id, fence.token)
    except DATABASE_ERRORS as exc:
        extra = {"thread_id": fence.thread_id, "error": type(exc).__name__}
        log.warning("fence row of a refused first run not deleted", extra=extra)
