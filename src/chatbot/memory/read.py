"""What is remembered about a user, read as the graph and `GET …/memory` need it: single-prefix reads.

The graph reads the profile and the current facts only; the closed facts (what was believed
before a fact changed) are read for `GET …/memory?history=true` alone: the model never sees them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import JsonValue

from chatbot.db.pool import Pool
from chatbot.ids import TenantId, UserId
from chatbot.memory import items
from chatbot.memory.facts import ClosedFact, Fact
from chatbot.memory.namespaces import PROFILE_KEY, facts_namespace, history_namespace, profile_namespace
from chatbot.responses import FactVersion, MemoryFact, UserMemory

# Closed facts shown by `GET …/memory?history=true` (the writer keeps at most 100 per user).
HISTORY_LIMIT = 200


@dataclass(frozen=True, slots=True)
class Remembered:
    """A user's profile and facts (newest fact first)."""

    profile: dict[str, JsonValue] = field(default_factory=dict)
    facts: list[items.StoredItem] = field(default_factory=list)


MemoryReader = Callable[[TenantId, UserId], Awaitable[Remembered]]
"""Called as `reader(tenant_id, user_id)`: what the graph reads at the start of each run."""


async def read_memory(
    pool: Pool, tenant_id: TenantId, user_id: UserId, *, max_facts: int, lifetime: items.Lifetime
) -> Remembered:
    """Return the user's profile and up to `max_facts` facts, newest first (a read refreshes their TTL).

    Profile and facts are two namespaces, so two statements, each naming one store prefix
    (one shard when the store is distributed by prefix), pipelined on one pooled connection:
    one round trip.
    """
    wanted = [
        items.Wanted(profile_namespace(tenant_id, user_id), key=PROFILE_KEY),
        items.Wanted(facts_namespace(tenant_id, user_id), limit=max_facts),
    ]
    async with pool.connection() as conn:
        profile, facts = await items.read_together(conn, wanted, lifetime)
    return Remembered(dict(profile[0].value) if profile else {}, facts)


async def read_history(
    pool: Pool, tenant_id: TenantId, user_id: UserId, *, limit: int, lifetime: items.Lifetime
) -> list[items.StoredItem]:
    """Return the user's closed facts (versions a later fact of the same kind replaced), newest first."""
    async with pool.connection() as conn:
        return await items.read(conn, history_namespace(tenant_id, user_id), limit, lifetime)


def memory_reader(pool: Pool, *, max_facts: int, lifetime: items.Lifetime) -> MemoryReader:
    """Return the graph's reader of a user's memory on `pool`."""

    async def read(tenant_id: TenantId, user_id: UserId) -> Remembered:
        return await read_memory(pool, tenant_id, user_id, max_facts=max_facts, lifetime=lifetime)

    return read


async def user_memory(
    pool: Pool, tenant_id: TenantId, user_id: UserId, *, max_facts: int, lifetime: items.Lifetime, history: bool
) -> UserMemory:
    """Return `GET …/memory`'s answer: the profile and current facts, oldest first, each with the
    run that last wrote it; with `history`, also every version with when it was believed.

    `history` is left unset (so out of the body) unless asked for.
    """
    found = await read_memory(pool, tenant_id, user_id, max_facts=max_facts, lifetime=lifetime)
    current = sorted(found.facts, key=lambda it: it.updated_at)
    facts = [_current(item) for item in current]
    if not history:
        return UserMemory(user_id=user_id, profile=found.profile, facts=facts)
    closed = await read_history(pool, tenant_id, user_id, limit=HISTORY_LIMIT, lifetime=lifetime)
    versions = [_version(item, closed=True) for item in closed] + [_version(item, closed=False) for item in current]
    versions.sort(key=lambda v: (v.valid_from, v.valid_until or datetime.max.replace(tzinfo=UTC)))
    return UserMemory(user_id=user_id, profile=found.profile, facts=facts, history=versions)


def _current(item: items.StoredItem) -> MemoryFact:
    """Return a current fact with the run that last wrote it."""
    fact = Fact.from_stored(item.value)
    return MemoryFact(
        id=item.key,
        text=fact.text,
        category=fact.category,
        updated_at=item.updated_at.astimezone(UTC),
        source=fact.source,
    )


def _version(item: items.StoredItem, *, closed: bool) -> FactVersion:
    """Return one version of a fact with when it was believed and the runs that wrote and closed it."""
    version = ClosedFact.from_stored(item.value) if closed else Fact.from_stored(item.value)
    until = version.valid_until if isinstance(version, ClosedFact) else None
    return FactVersion(
        id=item.key,
        text=version.text,
        category=version.category,
        valid_from=datetime.fromisoformat(version.valid_from) if version.valid_from else item.created_at,
        valid_until=datetime.fromisoformat(until) if until else None,
        source=version.source,
        closed_by=version.closed_by if isinstance(version, ClosedFact) else None,
    )
