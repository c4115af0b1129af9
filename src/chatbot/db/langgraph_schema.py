"""Whether LangGraph's tables are migrated to the installed library, and migrating them (`chatbot migrate`).

One of the `db/langgraph_*.py` modules, the only ones naming the library's tables (db/langgraph_tables.py
says why and holds the version they were checked on).
"""

from __future__ import annotations

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import sql

from chatbot.db.connection_options import Conn

# --- Schema versions (readiness) -----------------------------------------------------
# Raw: the library has no "is the schema current" call; `setup()` would migrate (DDL),
# which the server must never do. The migrations tables hold one row per applied step.


async def schema_version(conn: Conn, table: str) -> int:
    """Return the newest step recorded in a library migrations table, -1 when it does not exist."""
    exists = await (await conn.execute("select to_regclass(%s) as t", (table,))).fetchone()
    if not exists or exists["t"] is None:
        return -1
    row = await (await conn.execute(sql.SQL("select max(v) as v from {}").format(sql.Identifier(table)))).fetchone()
    return -1 if row is None or row["v"] is None else int(row["v"])


async def schema_problem(conn: Conn) -> str | None:
    """Return why the library's tables are not migrated to the installed version, or None."""
    if await schema_version(conn, "checkpoint_migrations") < len(AsyncPostgresSaver.MIGRATIONS) - 1:
        return "checkpoint tables missing or outdated"
    if await schema_version(conn, "store_migrations") < len(AsyncPostgresStore.MIGRATIONS) - 1:
        return "store tables missing or outdated"
    return None


async def setup(conn: Conn) -> list[str]:
    """Create or upgrade the saver's and the store's tables (public API); return which changed."""
    applied = []
    before = await schema_version(conn, "checkpoint_migrations")
    await AsyncPostgresSaver(conn).setup()
    if await schema_version(conn, "checkpoint_migrations") != before:
        applied.append("checkpointer")
    before = await schema_version(conn, "store_migrations")
    await AsyncPostgresStore(conn).setup()
    if await schema_version(conn, "store_migrations") != before:
        applied.append("store")
    return applied
