"""A reset is a reset: memory work submitted before `DELETE /v1/users/{id}/memory` never lands.

The reset records its moment (Postgres' clock) in `memory_resets` and deletes the user's
items in one transaction, holding the user's reset lock exclusively. Every memory write
runs in one transaction holding the same lock shared, and reads the row first: when the
last reset is younger than the job itself, the job may predate the reset and is dropped.
The comparison needs no synchronised clocks: the reset's age is measured by Postgres, the
job's by the replica's monotonic clock, after the read returned (so it can only overstate
the job's age, and a doubtful job is dropped, never written). The lock makes a write in
progress finish before the reset deletes, and a later write see the reset.

Transaction-scoped advisory locks end with their transaction, so nothing can leak them and
they work through PgBouncer in transaction mode; their key namespace is not the session
locks' (db/locks.py), which a memory job holds on another connection meanwhile.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from chatbot.db import langgraph_tables
from chatbot.db.pool import Pool
from chatbot.memory.namespaces import facts_namespace, profile_namespace, user_prefix

_KEY = "hashtextextended('chatbot/memory-reset/' || %s || '/' || %s, 0)"
_RESET = """
insert into memory_resets (tenant_id, user_id, reset_at) values (%s, %s, now())
on conflict (tenant_id, user_id) do update set reset_at = greatest(memory_resets.reset_at, excluded.reset_at)
"""
_SECONDS_SINCE_RESET = (
    "select extract(epoch from statement_timestamp() - reset_at)::float8 as seconds "
    "from memory_resets where tenant_id = %s and user_id = %s"
)


async def reset_memory(pool: Pool, tenant_id: str, user_id: str) -> int:
    """Delete the user's profile and facts and mark the reset; return how many items went."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(f"select pg_advisory_xact_lock({_KEY})", (tenant_id, user_id))
        await conn.execute(_RESET, (tenant_id, user_id))
        namespaces = [profile_namespace(tenant_id, user_id), facts_namespace(tenant_id, user_id)]
        return await langgraph_tables.delete_store_namespaces(conn, namespaces)


async def hold_for_write(conn: AsyncConnection[Any], tenant_id: str, user_id: str) -> float | None:
    """Take the user's reset lock shared for this transaction; return seconds since the last reset.

    None when the user's memory was never reset (or the row went with an erasure).
    """
    await conn.execute(f"select pg_advisory_xact_lock_shared({_KEY})", (tenant_id, user_id))
    row = await (await conn.execute(_SECONDS_SINCE_RESET, (tenant_id, user_id))).fetchone()
    return None if row is None else float(row["seconds"])


async def forget_resets(conn: AsyncConnection[Any], tenant_id: str, user_id: str) -> None:
    """Delete the user's reset row (erasure: no row may keep the user's id)."""
    await conn.execute("delete from memory_resets where tenant_id = %s and user_id = %s", (tenant_id, user_id))


async def erase_memory(conn: AsyncConnection[Any], tenant_id: str, user_id: str) -> int:
    """Delete everything stored under the user's namespace and the user's reset row; return items deleted.

    The whole namespace tree (`user_prefix`), not just profile and facts, in every table the
    catalogue keys by store prefix: memory a later version files elsewhere under the user
    goes too. Callers hold the user's lock (ops/erasure.py), so no memory write interleaves.
    """
    items = await langgraph_tables.delete_store_tree(conn, user_prefix(tenant_id, user_id))
    await forget_resets(conn, tenant_id, user_id)
    return items
