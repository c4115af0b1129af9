"""Tables found in the Postgres catalogue by the key they carry, rather than listed by hand.

Deletion that must leave nothing behind (a thread, an erased user) asks the catalogue which
tables hold a key: a table a library upgrade or a later migration adds, keyed the same way,
is then cleaned too, without anyone remembering to add it to a list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, sql

# Ordinary and partitioned tables of the schema the service's unqualified names resolve to
# (where `chatbot migrate` and the libraries' `setup()` create theirs); partitions are
# reached through their parent. Views and other schemas are never touched.
_TABLES_WITH_COLUMN = """
select c.relname as name
from pg_class c
join pg_attribute a on a.attrelid = c.oid
where c.relnamespace = current_schema()::regnamespace
  and c.relkind in ('r', 'p') and not c.relispartition
  and a.attname = %s and a.attnum > 0 and not a.attisdropped
order by c.relname
"""


async def tables_with_column(conn: AsyncConnection[Any], column: str) -> list[str]:
    """Return the names of the schema's tables that have a column named `column`."""
    rows = await (await conn.execute(_TABLES_WITH_COLUMN, (column,))).fetchall()
    return [r["name"] if isinstance(r, dict) else r[0] for r in rows]


async def delete_keyed(
    conn: AsyncConnection[Any], column: str, values: Sequence[str], *, skip: Sequence[str] = ()
) -> dict[str, int]:
    """Delete the rows whose `column` is one of `values` from every table having that column.

    `skip` names tables the caller has already cleaned. Returns rows deleted per table.
    """
    deleted: dict[str, int] = {}
    for table in await tables_with_column(conn, column):
        if table in skip:
            continue
        query = sql.SQL("delete from {} where {} = any(%s)").format(sql.Identifier(table), sql.Identifier(column))
        deleted[table] = max((await conn.execute(query, (list(values),))).rowcount, 0)
    return deleted
