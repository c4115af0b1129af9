"""The memory feature's reads and writes of LangGraph's `store` table: one exact prefix each, timestamps as parameters.

The store's own statements are refused by a store distributed by `prefix` (Citus): its
namespace search spans prefixes, its TTL refresh feeds a column to a STABLE function, its
upsert calls CURRENT_TIMESTAMP in `DO UPDATE SET`. The statements here
(db/langgraph_store.py, "Memory items") name one prefix by equality each; a TTL refresh is
a statement of its own, sent only when a TTL is configured; every moment is the replica's
clock, passed as a parameter. Rows keep the store's layout, so items the store wrote
before read here unchanged, and its TTL sweeper still deletes expired ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from psycopg import pq
from pydantic import JsonValue

from chatbot.db import langgraph_store
from chatbot.db.connection_options import Conn

# With no TTL, expired items are not hidden (the store's `omit_expired` is part of its TTL
# configuration): a moment before every `expires_at` shows them all.
_ALL = datetime(1, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class StoredItem:
    """One store row as the memory feature reads it."""

    key: str
    value: dict[str, JsonValue]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Lifetime:
    """How long memory items live: `ttl_minutes` None means forever (CHATBOT_MEMORY_TTL_DAYS=0)."""

    ttl_minutes: float | None = None

    def expires_at(self, now: datetime) -> datetime | None:
        """Return when an item written or read at `now` expires, None when it never does."""
        return None if self.ttl_minutes is None else now + timedelta(minutes=self.ttl_minutes)

    def visible_after(self, now: datetime) -> datetime:
        """Return the moment an item must expire after to be read (expired items are hidden with a TTL)."""
        return _ALL if self.ttl_minutes is None else now


def prefix_of(namespace: tuple[str, ...]) -> str:
    """Return the store's `prefix` of a namespace (its labels joined by ".", as the store writes it)."""
    return ".".join(namespace)


def utcnow() -> datetime:
    """Return the replica's clock, the moment statements here pass as a parameter."""
    return datetime.now(UTC)


async def read(conn: Conn, namespace: tuple[str, ...], limit: int, lifetime: Lifetime) -> list[StoredItem]:
    """Return up to `limit` items of exactly `namespace`, newest first, and refresh their TTL when one is set."""
    now = utcnow()
    prefix = prefix_of(namespace)
    rows = await langgraph_store.store_items(conn, prefix, lifetime.visible_after(now), limit)
    await refresh(conn, prefix, lifetime, now)
    return [_item(row) for row in rows]


async def read_one(conn: Conn, namespace: tuple[str, ...], key: str, lifetime: Lifetime) -> StoredItem | None:
    """Return one item of `namespace` (None when absent or expired), refreshing its namespace's TTL."""
    now = utcnow()
    prefix = prefix_of(namespace)
    row = await langgraph_store.store_item(conn, prefix, key, lifetime.visible_after(now))
    await refresh(conn, prefix, lifetime, now)
    return None if row is None else _item(row)


@dataclass(frozen=True, slots=True)
class Wanted:
    """One read of `read_together`: the item `key` of `namespace`, or up to `limit` items of it."""

    namespace: tuple[str, ...]
    key: str | None = None
    limit: int = 1


async def read_together(conn: Conn, wanted: Sequence[Wanted], lifetime: Lifetime) -> list[list[StoredItem]]:
    """Return each read's items (newest first; none or one for a key), all sent in one round trip.

    The reads and their namespaces' TTL refreshes go out in one pipeline, as `read` and
    `read_one` one after the other would send them; only the waiting is shared.
    """
    now = utcnow()
    # Inside a pipeline already (a transaction sent in one flush), a nested one would sync first.
    in_pipeline = conn.pgconn.pipeline_status != pq.PipelineStatus.OFF
    async with contextlib.nullcontext() if in_pipeline else conn.pipeline():
        cursors = [
            await langgraph_store.send_store_read(
                conn, prefix_of(w.namespace), lifetime.visible_after(now), key=w.key, limit=w.limit
            )
            for w in wanted
        ]
        for prefix in dict.fromkeys(prefix_of(w.namespace) for w in wanted):
            await refresh(conn, prefix, lifetime, now)
    # Fetched after the pipeline's end: inside it, a fetch flushes first and the closing `Sync`
    # costs a round trip of its own.
    return [[_item(row) for row in await cursor.fetchall()] for cursor in cursors]


async def refresh(conn: Conn, prefix: str, lifetime: Lifetime, now: datetime) -> None:
    """Move the namespace's expiry forward (a read counts as use); no statement without a TTL."""
    expires_at = lifetime.expires_at(now)
    if expires_at is not None:
        await langgraph_store.refresh_store_items(conn, prefix, expires_at, now)


async def put(
    conn: Conn, namespace: tuple[str, ...], values: Sequence[tuple[str, Mapping[str, object]]], lifetime: Lifetime
) -> None:
    """Insert or replace items of `namespace` (key, value: a JSON object), stamped with the replica's clock."""
    if not values:
        return
    now = utcnow()
    await langgraph_store.upsert_store_items(
        conn,
        prefix_of(namespace),
        [(key, dict(value)) for key, value in values],
        now=now,
        expires_at=lifetime.expires_at(now),
        ttl_minutes=lifetime.ttl_minutes,
    )


async def delete_keys(conn: Conn, namespace: tuple[str, ...], keys: Sequence[str]) -> int:
    """Delete these keys of `namespace`; return how many items went."""
    if not keys:
        return 0
    return await langgraph_store.delete_store_keys(conn, prefix_of(namespace), keys)


async def delete_namespace(conn: Conn, namespace: tuple[str, ...]) -> int:
    """Delete every item of exactly `namespace`, expired ones too; return how many went."""
    return await langgraph_store.delete_store_prefix(conn, prefix_of(namespace))


async def matching(
    conn: Conn, namespace: tuple[str, ...], json_path: str, variables: Mapping[str, JsonValue]
) -> list[StoredItem]:
    """Return the items of `namespace` (expired ones too) whose value matches the SQL/JSON path `json_path`."""
    rows = await langgraph_store.store_items_matching(conn, prefix_of(namespace), json_path, variables)
    return [_item(row) for row in rows]


async def replace_value(conn: Conn, namespace: tuple[str, ...], key: str, value: Mapping[str, object]) -> None:
    """Rewrite one item's value in place: a correction, not a use, so its times and expiry stay."""
    await langgraph_store.set_store_value(conn, prefix_of(namespace), key, value)


def _item(row: Mapping[str, object]) -> StoredItem:
    value = row["value"]
    return StoredItem(
        key=str(row["key"]),
        value=dict(value) if isinstance(value, dict) else {},
        created_at=_moment(row["created_at"]),
        updated_at=_moment(row["updated_at"]),
    )


def _moment(value: object) -> datetime:
    """Return a `timestamptz` column's value (psycopg reads it as an aware datetime)."""
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    return value
