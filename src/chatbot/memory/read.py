"""What is remembered about a user, read as the graph and `GET …/memory` need it: single-prefix reads.

The graph reads the profile and the current facts only; the closed facts (what was believed
before a fact changed) are read for `GET …/memory?history=true` alone: the model never sees them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from chatbot.db.pool import Pool
from chatbot.memory import items
from chatbot.memory.namespaces import PROFILE_KEY, facts_namespace, history_namespace, profile_namespace


@dataclass(frozen=True, slots=True)
class Remembered:
    """A user's profile and facts (newest fact first)."""

    profile: dict[str, Any] = field(default_factory=dict)
    facts: list[items.StoredItem] = field(default_factory=list)


MemoryReader = Callable[[str, str], Awaitable[Remembered]]
"""Called as `reader(tenant_id, user_id)`: what the graph reads at the start of each run."""


async def read_memory(
    pool: Pool, tenant_id: str, user_id: str, *, max_facts: int, lifetime: items.Lifetime
) -> Remembered:
    """Return the user's profile and up to `max_facts` facts, newest first (a read refreshes their TTL).

    Profile and facts are two namespaces, so two statements, each naming one store prefix
    (one shard when the store is distributed by prefix), on one pooled connection.
    """
    async with pool.connection() as conn:
        profile = await items.read_one(conn, profile_namespace(tenant_id, user_id), PROFILE_KEY, lifetime)
        facts = await items.read(conn, facts_namespace(tenant_id, user_id), max_facts, lifetime)
    return Remembered(dict(profile.value) if profile else {}, facts)


async def read_history(
    pool: Pool, tenant_id: str, user_id: str, *, limit: int, lifetime: items.Lifetime
) -> list[items.StoredItem]:
    """Return the user's closed facts (versions a later fact of the same kind replaced), newest first."""
    async with pool.connection() as conn:
        return await items.read(conn, history_namespace(tenant_id, user_id), limit, lifetime)


def memory_reader(pool: Pool, *, max_facts: int, lifetime: items.Lifetime) -> MemoryReader:
    """Return the graph's reader of a user's memory on `pool`."""

    async def read(tenant_id: str, user_id: str) -> Remembered:
        return await read_memory(pool, tenant_id, user_id, max_facts=max_facts, lifetime=lifetime)

    return read
