"""Transaction-scoped advisory locks: held on the caller's pool connection until its transaction ends.

Beside db/locks.py's session locks (a run's thread, a user, an erasure), these guard a few
writes against each other for one transaction: a memory reset against memory writes, a
tenant's vocabulary rebuild against another, a thread's deletion against a late write keyed
by the thread.
"""

from __future__ import annotations

from chatbot.db.connection_options import Conn
from chatbot.ids import TenantId, ThreadId, UserId

# Transaction-scoped advisory locks, on the caller's pool connection: they end with their
# transaction, so nothing can leak them and they work through PgBouncer in transaction
# mode. Their keys are namespaces of their own, apart from db/locks.py's session locks.
_MEMORY_RESET_KEY = "hashtextextended('chatbot/memory-reset/' || %s || '/' || %s, 0)"
_HOLD_MEMORY_RESET = f"select pg_advisory_xact_lock({_MEMORY_RESET_KEY})"
_SHARE_MEMORY_RESET = f"select pg_advisory_xact_lock_shared({_MEMORY_RESET_KEY})"
_HOLD_VOCABULARY = "SELECT pg_advisory_xact_lock(hashtext('kb_terms'), hashtext(%s))"
# A thread's rows: a deletion (thread DELETE, erasure, retention) holds each thread's key
# exclusively for its transaction, a late write keyed by the thread (a run's feedback) holds
# it shared while it checks the thread and writes. Whichever comes first, the other sees its
# result: a rating never outlives its thread or its user. The deletion takes its keys in one
# order, so two deletions of overlapping threads cannot deadlock.
_THREAD_ROWS_KEY = "hashtextextended('chatbot/thread-rows/' || %s, 0)"
_SHARE_THREAD_ROWS = f"select pg_advisory_xact_lock_shared({_THREAD_ROWS_KEY})"
_HOLD_THREADS_ROWS = """
select pg_advisory_xact_lock(hashtextextended('chatbot/thread-rows/' || id, 0))
from (select distinct id from unnest(%s::text[]) as ids(id) order by id) as ordered
"""


async def hold_memory_reset(conn: Conn, tenant_id: TenantId, user_id: UserId, *, shared: bool) -> None:
    """Take the user's memory-reset lock for this transaction (memory/resets.py says who takes it how).

    Shared for a memory write or a job's row insert, exclusive for a reset or a fact's delete.
    """
    await conn.execute(_SHARE_MEMORY_RESET if shared else _HOLD_MEMORY_RESET, (tenant_id, user_id))


async def hold_vocabulary(conn: Conn, tenant_id: TenantId) -> None:
    """Take the tenant's vocabulary lock for this transaction (retrieval/queries.py's rebuild of `kb_terms`).

    Two ingests of one tenant rebuilding it at once would otherwise interleave delete and insert.
    """
    await conn.execute(_HOLD_VOCABULARY, (tenant_id,))


async def share_thread_rows(conn: Conn, thread_id: ThreadId) -> None:
    """Hold the thread's rows key shared for this transaction: no deletion of the thread meanwhile."""
    await conn.execute(_SHARE_THREAD_ROWS, (thread_id,))


async def hold_threads_rows(conn: Conn, thread_ids: list[ThreadId]) -> None:
    """Hold the threads' rows keys exclusively for this transaction (a deletion waits for writes under way)."""
    await conn.execute(_HOLD_THREADS_ROWS, (thread_ids,))
