"""The LangGraph store's rows by statements of our own: memory's items, and deleting them by namespace.

One of the `db/langgraph_*.py` modules, the only ones naming the library's tables (db/langgraph_tables.py
says why and holds the version they were checked on). The store's layout of a user's memory
is memory's (memory/namespaces.py): these statements run on the prefixes it gives them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from chatbot.db.catalogue import tables_with_column
from chatbot.db.connection_options import Conn, Cursor

STORE_TABLE = "store"


# Items of one prefix whose value matches an SQL/JSON path, and a value rewritten in place:
# the memory feature's walk that takes a deleted thread out of what it stored
# (memory/thread_deletion.py) reads and rewrites with these, knowing the values' shape itself.
# One prefix by equality per statement, each rewrite by (prefix, key): router statements on
# a store distributed by prefix.
_ITEMS_MATCHING = """
select key, value, created_at, updated_at from store
where prefix = %s and jsonb_path_exists(value, %s::jsonpath, %s)
"""
_SET_VALUE = "update store set value = %s where prefix = %s and key = %s"


async def store_items_matching(
    conn: Conn, prefix: str, json_path: str, variables: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Return the rows of exactly `prefix` (expired ones too) whose value matches `json_path` with `variables`."""
    cur = await conn.execute(_ITEMS_MATCHING, (prefix, json_path, Jsonb(dict(variables))))
    return list(await cur.fetchall())


async def set_store_value(conn: Conn, prefix: str, key: str, value: Mapping[str, Any]) -> None:
    """Replace one row's value, leaving its timestamps and expiry as they were."""
    await conn.execute(_SET_VALUE, (Jsonb(dict(value)), prefix, key))


# --- Memory items: the store's rows by statements of our own --------------------------------
# Raw: the store's own SQL reads a namespace with `prefix = $1 OR prefix LIKE $2` inside a CTE
# whose TTL refresh feeds a column to `NOW() + ... ::interval`, and upserts with
# `updated_at = CURRENT_TIMESTAMP` in `DO UPDATE SET`; a store distributed by `prefix` (Citus)
# refuses all three. Each statement here names one prefix by equality, and every moment is a
# parameter (memory/items.py passes the replica's clock). The rows keep the store's layout,
# so the store's TTL sweeper still deletes expired items.

_ITEMS = """
select key, value, created_at, updated_at from store
where prefix = %(prefix)s and (expires_at is null or expires_at > %(visible_after)s)
order by updated_at desc limit %(limit)s
"""
_ITEM = """
select key, value, created_at, updated_at from store
where prefix = %(prefix)s and key = %(key)s and (expires_at is null or expires_at > %(visible_after)s)
"""
# Items written while no TTL was set carry none until they are next written (the store's rule).
_REFRESH_ITEMS = """
update store set expires_at = %(expires_at)s
where prefix = %(prefix)s and ttl_minutes is not null and (expires_at is null or expires_at > %(now)s)
"""
_UPSERT_ITEM = """
insert into store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes)
values (%(prefix)s, %(key)s, %(value)s, %(now)s, %(now)s, %(expires_at)s, %(ttl_minutes)s)
on conflict (prefix, key) do update
set value = excluded.value, updated_at = excluded.updated_at,
    expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes
"""


async def store_items(conn: Conn, prefix: str, visible_after: datetime, limit: int) -> list[dict[str, Any]]:
    """Return up to `limit` rows of exactly `prefix` expiring after `visible_after`, newest first."""
    params = {"prefix": prefix, "visible_after": visible_after, "limit": limit}
    return list(await (await conn.execute(_ITEMS, params)).fetchall())


async def send_store_read(
    conn: Conn, prefix: str, visible_after: datetime, *, key: str | None = None, limit: int = 1
) -> Cursor:
    """Send one read of `prefix` (the row of `key`, or up to `limit` rows newest first); return its cursor.

    In a pipeline the read goes out without waiting: several reads sent this way come back
    in the round trip of the first fetch.
    """
    if key is None:
        return await conn.execute(_ITEMS, {"prefix": prefix, "visible_after": visible_after, "limit": limit})
    return await conn.execute(_ITEM, {"prefix": prefix, "key": key, "visible_after": visible_after})


async def store_item(conn: Conn, prefix: str, key: str, visible_after: datetime) -> dict[str, Any] | None:
    """Return one row (key, value, created_at, updated_at), None when absent or expired by `visible_after`."""
    params = {"prefix": prefix, "key": key, "visible_after": visible_after}
    return await (await conn.execute(_ITEM, params)).fetchone()


async def refresh_store_items(conn: Conn, prefix: str, expires_at: datetime, now: datetime) -> None:
    """Set the expiry of the prefix's unexpired rows that carry a TTL."""
    await conn.execute(_REFRESH_ITEMS, {"prefix": prefix, "expires_at": expires_at, "now": now})


async def upsert_store_items(
    conn: Conn,
    prefix: str,
    values: Sequence[tuple[str, dict[str, Any]]],
    *,
    now: datetime,
    expires_at: datetime | None,
    ttl_minutes: float | None,
) -> None:
    """Insert or replace rows (key, value) of `prefix`, all stamped `now`."""
    rows = [
        {
            "prefix": prefix,
            "key": key,
            "value": Jsonb(value),
            "now": now,
            "expires_at": expires_at,
            "ttl_minutes": ttl_minutes,
        }
        for key, value in values
    ]
    async with conn.cursor() as cur:
        await cur.executemany(_UPSERT_ITEM, rows)


async def delete_store_keys(conn: Conn, prefix: str, keys: Sequence[str]) -> int:
    """Delete these keys of exactly `prefix`; return how many rows went."""
    cur = await conn.execute("delete from store where prefix = %s and key = any(%s)", (prefix, list(keys)))
    return max(cur.rowcount, 0)


async def delete_store_prefix(conn: Conn, prefix: str) -> int:
    """Delete every row of exactly `prefix`, expired ones too; return how many went."""
    cur = await conn.execute("delete from store where prefix = %s", (prefix,))
    return max(cur.rowcount, 0)


async def delete_store_tree(conn: Conn, namespace: tuple[str, ...]) -> int:
    """Delete every row under `namespace` (itself and all namespaces below it) from every table keyed by `prefix`.

    Tables come from the catalogue (db/catalogue.py), not a list, so a table a later store
    version adds keyed the same way is emptied too (erasure must leave nothing). Returns how
    many `store` items went. Raw: the store has no delete by namespace, and `asearch` +
    `adelete` would need a page loop and, with `omit_expired`, would skip items expired but
    not yet swept, which must go too.
    """
    root = _prefix(namespace)
    items = 0
    # Store first: `store_vectors` rows cascade from it; any other table is swept after.
    for table in sorted(await tables_with_column(conn, "prefix"), key=lambda t: t != STORE_TABLE):
        cur = await conn.execute(
            # `starts_with`, not LIKE: labels may contain `_`, a LIKE wildcard. It uses the store's
            # prefix index (text_pattern_ops) as LIKE would (Postgres 18, checked with EXPLAIN).
            sql.SQL("delete from {} where prefix = %s or starts_with(prefix, %s)").format(sql.Identifier(table)),
            (root, root + "."),
        )
        if table == STORE_TABLE:
            items = max(cur.rowcount, 0)
    return items


def _prefix(namespace: tuple[str, ...]) -> str:
    # The store keeps a namespace as its labels joined by "."; labels cannot contain one
    # (the store refuses them, and the service's ids exclude it).
    return ".".join(namespace)
