"""Finding a thread's recall rows by owner and by id, whatever its checkpoints hold.

Deletion, retention and erasure find a thread through its checkpoints; recall's rows name
the thread and the owner they were indexed for, so a thread whose checkpoints are gone (a
run that wrote after losing its lock, before its index writes passed the thread's fence)
is still found by them: a thread DELETE by the index's owner, an erasure of that owner, a
retention pass. Deleting the rows is deletion's, through the catalogue (threads/deletion.py);
replacing another owner's index under a thread id that was given again is `forget_index`.
"""

from __future__ import annotations

from collections.abc import Sequence

from chatbot.db.connection_options import Conn
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.recall import queries


async def index_owner(conn: Conn, thread_id: ThreadId) -> tuple[TenantId, UserId] | None:
    """Return the (tenant, user) the thread's recall rows were indexed for, None without rows."""
    return await queries.index_owner(conn, thread_id)


async def threads_indexed_for(conn: Conn, tenant_id: TenantId, user_id: UserId) -> list[ThreadId]:
    """Return the threads holding recall rows indexed for this tenant and user."""
    return await queries.indexed_for(conn, tenant_id, user_id)


async def indexed_threads_after(conn: Conn, after: str, limit: int) -> list[ThreadId]:
    """Return up to `limit` threads with recall rows after `after`, by id (a retention pass's scan)."""
    return await queries.indexed_after(conn, after, limit)


async def forget_index(conn: Conn, thread_ids: Sequence[ThreadId]) -> None:
    """Delete the threads' recall rows (their next run indexes them again from their own transcript)."""
    for thread_id in thread_ids:
        await queries.forget_thread(conn, thread_id)
