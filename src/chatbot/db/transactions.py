"""A write transaction sent as one flush: `BEGIN`, its statements and `COMMIT` with one `Sync`.

psycopg's `conn.transaction()` inside a pipeline syncs after `BEGIN` and again after `COMMIT`
(it nests pipelines to learn the transaction's state), so a transaction of one statement
costs four round trips where the network need charge one (docs/measurements/performance.md,
"Round trips to Postgres"). Here `BEGIN` and `COMMIT` are plain statements of the pipeline:
everything goes out together and the pipeline's one `Sync` brings every result back.

The same guarantees: a statement that fails makes Postgres skip the rest, `COMMIT`
included, until the `Sync`, and the failure is raised here after the transaction is rolled
back; an exception inside the block rolls back whatever was sent. Nothing is committed
unless every statement succeeded.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus

_BEGIN = "begin"
_COMMIT = "commit"


AfterCommit = Callable[[AsyncConnection[Any]], Awaitable[None]]
"""Sends statements (without fetching) to run after `COMMIT`, in the same flush: reads of what was written."""


@contextlib.asynccontextmanager
async def one_flush_transaction(
    conn: AsyncConnection[Any], *, after_commit: AfterCommit | None = None
) -> AsyncIterator[AsyncConnection[Any]]:
    """Run the statements inside as one transaction, sent in one flush with `BEGIN` and `COMMIT`.

    `conn` is an autocommit connection out of pipeline mode; the statements inside are sent
    without waiting (a fetch inside waits for its own result, as in any pipeline).
    `after_commit` sends statements that follow `COMMIT` in the same flush: they see the
    transaction committed, and are skipped with it if a statement failed.
    """
    try:
        async with conn.pipeline():
            await conn.execute(_BEGIN)
            yield conn
            await conn.execute(_COMMIT)
            if after_commit is not None:
                await after_commit(conn)
    except BaseException:
        # A failed statement leaves the session in the failed transaction (the `Sync` ends
        # an explicit one only at `COMMIT`); an exception of the block leaves it open.
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await conn.execute("rollback")
        raise
