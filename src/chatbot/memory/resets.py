"""A reset is a reset: memory work submitted before `DELETE /v1/users/{id}/memory` never lands.

Work is submitted as a `memory_jobs` row (memory/jobs.py), written in a transaction that
holds the user's reset lock shared; the memory write, in one transaction, holds it shared
too and deletes the row before it writes. A reset holds the lock exclusively while it
deletes the user's rows and items: a job submitted before it has its row deleted (its
work then finds nothing to take and drops itself), a write in progress finishes before
the reset deletes what it wrote, and a later one comes after the reset. Deleting one fact
takes the lock exclusively too, so no write in progress puts it back; it deletes the fact's
closed versions and the profile entries that came only from it in the same transaction.

Transaction-scoped advisory locks end with their transaction, so nothing can leak them and
they work through PgBouncer in transaction mode; the lock is db/locks.py's
(`hold_memory_reset`), its key namespace not the session locks', which a memory job holds
on another connection meanwhile.

`memory_resets` rows (the moment of each reset, which an earlier version compared with each
job's age) are no longer written; erasure still deletes any left.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg import AsyncConnection

from chatbot.db import langgraph_store
from chatbot.db.pool import Pool
from chatbot.db.transaction_locks import hold_memory_reset
from chatbot.ids import TenantId, UserId
from chatbot.memory import _profile_sources as profile_sources
from chatbot.memory import items, queries
from chatbot.memory.extraction import stored_profile
from chatbot.memory.facts import ClosedFact
from chatbot.memory.namespaces import (
    PROFILE_KEY,
    PROFILE_SOURCES_KEY,
    facts_namespace,
    history_namespace,
    profile_namespace,
    user_prefix,
)

# Closed versions read to find those of a forgotten fact (the writer keeps at most 100).
MAX_HISTORY_READ = 200


async def _hold_exclusive(conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId) -> None:
    await hold_memory_reset(conn, tenant_id, user_id, shared=False)


async def reset_memory(
    pool: Pool, tenant_id: TenantId, user_id: UserId, *, drop_queued: Callable[[TenantId, UserId], None] | None = None
) -> int:
    """Delete the user's profile, facts and pending memory jobs; return how many items went.

    `drop_queued` (the replica's `MemoryWriter.forget`) drops this replica's queued jobs first, at once.
    """
    if drop_queued is not None:
        drop_queued(tenant_id, user_id)
    async with pool.connection() as conn, conn.transaction():
        await _hold_exclusive(conn, tenant_id, user_id)
        await queries.delete_jobs_of_user(conn, tenant_id, user_id)
        # One statement per namespace: each names one store prefix.
        deleted = await items.delete_namespace(conn, profile_namespace(tenant_id, user_id))
        deleted += await items.delete_namespace(conn, history_namespace(tenant_id, user_id))
        return deleted + await items.delete_namespace(conn, facts_namespace(tenant_id, user_id))


async def forget_fact(pool: Pool, tenant_id: TenantId, user_id: UserId, fact_id: str, lifetime: items.Lifetime) -> bool:
    """Delete one of the user's facts, its closed versions and what the profile took only from it.

    `fact_id` is a current fact's id or a closed version's (`GET …/memory?history=true`).
    False when the user has neither.
    """
    async with pool.connection() as conn, conn.transaction():
        await _hold_exclusive(conn, tenant_id, user_id)
        history_ns = history_namespace(tenant_id, user_id)
        versions = [
            item.key
            for item in await items.read(conn, history_ns, MAX_HISTORY_READ, lifetime)
            if item.key == fact_id or ClosedFact.from_stored(item.value).fact_id == fact_id
        ]
        deleted = await items.delete_keys(conn, facts_namespace(tenant_id, user_id), [fact_id])
        deleted += await items.delete_keys(conn, history_ns, versions)
        if deleted:
            await _forget_derived(conn, tenant_id, user_id, fact_id, lifetime)
        return deleted > 0


async def _forget_derived(
    conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId, fact_id: str, lifetime: items.Lifetime
) -> None:
    """Remove from the profile the entries whose every source is the forgotten fact."""
    profile_ns = profile_namespace(tenant_id, user_id)
    profile = await items.read_one(conn, profile_ns, PROFILE_KEY, lifetime)
    sources = await items.read_one(conn, profile_ns, PROFILE_SOURCES_KEY, lifetime)
    if profile is None or sources is None:
        return
    kept_profile, kept_sources = profile_sources.forget(
        stored_profile(profile.value), profile_sources.stored_sources(sources.value), fact_id
    )
    puts: list[tuple[str, Mapping[str, object]]] = [
        (key, value)
        for key, value, old in (
            (PROFILE_KEY, kept_profile, profile.value),
            (PROFILE_SOURCES_KEY, kept_sources, sources.value),
        )
        if value != old
    ]
    await items.put(conn, profile_ns, puts, lifetime)


async def hold_for_write(conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId) -> None:
    """Take the user's reset lock shared for this transaction (a job's row insert, a memory write)."""
    await hold_memory_reset(conn, tenant_id, user_id, shared=True)


async def erase_memory(conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId) -> int:
    """Delete everything stored under the user's namespace, their pending memory jobs and reset row.

    Returns the store items deleted. The whole namespace tree (`user_prefix`), not just
    profile and facts, in every table the catalogue keys by store prefix: memory a later
    version files elsewhere under the user goes too. Callers hold the user's lock
    (ops/erasure.py), so no memory write interleaves; a job claimed before finds its row
    gone and drops itself.
    """
    await queries.delete_jobs_of_user(conn, tenant_id, user_id)
    items_deleted = await langgraph_store.delete_store_tree(conn, user_prefix(tenant_id, user_id))
    await queries.forget_resets(conn, tenant_id, user_id)
    return items_deleted
