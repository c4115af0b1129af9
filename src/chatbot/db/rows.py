"""Typed rows: run a statement and get each row as the TypedDict of the columns it selects.

`class_row` builds each row by calling the type with the columns as keywords, which a
TypedDict accepts; mypy then checks every column a caller reads against the statement's.
"""

from __future__ import annotations

from typing import Any, TypeVar

from psycopg import AsyncConnection
from psycopg.abc import Params
from psycopg.rows import class_row

Row = TypeVar("Row")


async def fetch_all(conn: AsyncConnection[Any], row: type[Row], query: str, params: Params | None = None) -> list[Row]:
    """Return a statement's rows, each built as `row`."""
    async with conn.cursor(row_factory=class_row(row)) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


async def fetch_one(conn: AsyncConnection[Any], row: type[Row], query: str, params: Params | None = None) -> Row | None:
    """Return a statement's first row built as `row`, None without one."""
    async with conn.cursor(row_factory=class_row(row)) as cur:
        await cur.execute(query, params)
        return await cur.fetchone()
