"""Schema migrations: the checkpointer's, the store's and the service's own, in one step.

Only `chatbot migrate` runs this; the server never issues DDL. Concurrent runs are
serialised by a *polled* `pg_try_advisory_lock`: a blocking `pg_advisory_lock` waits inside
a transaction, and `CREATE INDEX CONCURRENTLY` in the lock holder then waits for that
transaction to end, a deadlock nobody reports (it happened, hence the polling).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from chatbot.db import langgraph_schema

# A fixed key in a namespace of our own (first half of the two-int form: "chbt" in ASCII).
_MIGRATE_LOCK = (0x63686274, 1)
_OWN_TABLE = "chatbot_schema_migrations"


@dataclass(frozen=True, slots=True)
class Migration:
    """One of the service's own schema changes, a SQL file in `db/migrations/`."""

    version: int
    name: str
    sql: str


def own_migrations() -> list[Migration]:
    """Return the service's migrations, ordered by the number their file name starts with."""
    found = []
    for entry in resources.files("chatbot.db.migrations").iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a number: {versions}")
    return found


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What one `migrate` call applied."""

    applied: list[str]
    waited_seconds: float


async def migrate(conninfo: str, *, lock_timeout: float = 300.0) -> MigrationReport:
    """Create or upgrade every table; safe to run from several processes at once."""
    async with await AsyncConnection.connect(
        conninfo, autocommit=True, row_factory=dict_row, prepare_threshold=None
    ) as conn:
        waited = await _acquire_polled(conn, lock_timeout)
        try:
            applied = await _apply_all(conn)
        finally:
            await conn.execute("select pg_advisory_unlock(%s, %s)", _MIGRATE_LOCK)
    return MigrationReport(applied, waited)


async def _acquire_polled(conn: AsyncConnection[Any], timeout: float) -> float:
    started = time.monotonic()
    while True:
        row = await (await conn.execute("select pg_try_advisory_lock(%s, %s) as ok", _MIGRATE_LOCK)).fetchone()
        if row and row["ok"]:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError("another `chatbot migrate` has held the migration lock for too long")
        await asyncio.sleep(0.05 + random.random() * 0.1)


async def _apply_all(conn: AsyncConnection[Any]) -> list[str]:
    applied = await langgraph_schema.setup(conn)  # the saver's and the store's own `setup()`
    await conn.execute(
        f"create table if not exists {_OWN_TABLE} ("
        " version integer primary key, name text not null,"
        " applied_at timestamptz not null default now())"
    )
    done = {r["version"] for r in await (await conn.execute(f"select version from {_OWN_TABLE}")).fetchall()}
    for migration in own_migrations():
        if migration.version in done:
            continue
        async with conn.transaction():
            await conn.execute(migration.sql.encode())
            await conn.execute(
                f"insert into {_OWN_TABLE} (version, name) values (%s, %s)", (migration.version, migration.name)
            )
        applied.append(f"{migration.version:04d}_{migration.name}")
    return applied


async def schema_problem(conn: AsyncConnection[Any]) -> str | None:
    """Return why the schema is not ready for this version of the service, or None."""
    problem = await langgraph_schema.schema_problem(conn)
    if problem is not None:
        return problem
    exists = await (await conn.execute("select to_regclass(%s) as t", (_OWN_TABLE,))).fetchone()
    if not exists or exists["t"] is None:
        return "service tables missing"
    rows = await (await conn.execute(f"select version from {_OWN_TABLE}")).fetchall()
    missing = {m.version for m in own_migrations()} - {r["version"] for r in rows}
    if missing:
        return f"service migrations not applied: {sorted(missing)}"
    return None
