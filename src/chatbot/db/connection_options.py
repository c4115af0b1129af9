"""The options every connection of ours is opened with, and the one alias of a connection and a cursor."""

from __future__ import annotations

from typing import Any, TypedDict

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import AsyncRowFactory, DictRow


class ConnectionOptions(TypedDict, total=False):
    """Keyword options of `AsyncConnection.connect` that the pool, locks and listeners share."""

    autocommit: bool
    row_factory: AsyncRowFactory[DictRow]
    prepare_threshold: int | None
    keepalives: int
    keepalives_idle: int
    keepalives_interval: int
    keepalives_count: int


def without_rows(options: ConnectionOptions) -> ConnectionOptions:
    """Return `options` without the one that shapes result rows (a probe, a LISTEN session)."""
    plain = options.copy()
    plain.pop("row_factory", None)
    return plain


Conn = AsyncConnection[Any]
"""A connection as the statements' functions take it, declared here only (the shape test holds that).

Pooled connections give dict rows (`row_factory=dict_row`); the rows stay `Any` because a
statement whose rows have a type builds them itself (db/rows.py's typed rows, a validated read).
"""
Cursor = AsyncCursor[Any]
"""A cursor of a `Conn`: what a statement sent without fetching (in a pipeline) hands back."""
