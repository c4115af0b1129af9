"""Memory lifetime: the LangGraph store's TTL columns, from `CHATBOT_MEMORY_TTL_DAYS`.

An item's `expires_at` moves forward on every write and every read (the graph's read at
the start of each run, the memory endpoint, the writer's reads: memory/items.py, a refresh
statement apart from each read, sent only when a TTL is set), so only memory nobody used
for that long expires. Expired items are hidden from reads at
once (`omit_expired`) and deleted by the store's sweeper, which each replica runs every
`memory_ttl_sweep_minutes` (one minute by default: an item goes at most about a minute
after it expires). Items written while no TTL was set carry none until they are next written.
"""

from __future__ import annotations

from typing import cast

from langgraph.store.base import TTLConfig
from langgraph.store.postgres.aio import AsyncPostgresStore

MINUTES_PER_DAY = 24 * 60


def memory_ttl(days: float) -> TTLConfig | None:
    """Return the store's TTL configuration for `days` (None: memory never expires)."""
    if days <= 0:
        return None
    return {
        "default_ttl": days * MINUTES_PER_DAY,
        "refresh_on_read": True,
        "omit_expired": True,
        "sweep_interval_minutes": 1,
    }


async def start_memory_sweeper(store: AsyncPostgresStore, sweep_minutes: float) -> None:
    """Start the store's TTL sweeper when the store has a TTL."""
    if store.ttl_config is None:
        return
    # The sweeper's loop waits `float(minutes) * 60` seconds, so a fraction of a minute works,
    # though the parameter is annotated `int`.
    await store.start_ttl_sweeper(cast(int, sweep_minutes))
