"""The options every connection of ours is opened with, and the row type they give."""

from __future__ import annotations

from typing import TypedDict

from psycopg import AsyncConnection
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


Connection = AsyncConnection[DictRow]
"""A connection whose rows are dicts (`row_factory=dict_row`), as every pooled one is."""
