"""The checkpointer: `AsyncPostgresSaver` without its instance lock when it runs on a pool.

`AsyncPostgresSaver._cursor` takes `self.lock` (one `asyncio.Lock` per saver) around
every call, pool or not. The lock exists to keep coroutines off one shared connection;
on a pool every `_cursor` call checks out a connection of its own, so the lock only
makes every run of the replica queue behind every other run's checkpoint reads and
writes (including the blob serialisation `aput` does while holding it). At 16
concurrent runs it cost us throughput and latency (docs/performance.md, "Runs").
The store (`AsyncPostgresStore`) already skips its lock for pools; the same change for
the saver is proposed upstream (langchain-ai/langgraph#7259, PR #7269).

This relies on library internals, so it is pinned: constructing the saver fails when
the installed langgraph-checkpoint-postgres is outside the versions we verified, and
tests/db/test_saver.py fails when the library stops doing what we rely on. When the
upstream fix ships, drop this module and use `AsyncPostgresSaver` again.
"""

from __future__ import annotations

import asyncio
import re
from importlib.metadata import version
from typing import Literal

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver, Conn
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncPipeline
from psycopg_pool import AsyncConnectionPool

PACKAGE = "langgraph-checkpoint-postgres"
# Verified: 3.2.0 (the `_cursor` of this line takes `self.lock` and nothing else does).
# Patch releases of the line are accepted because tests/db/test_saver.py re-checks the
# source and the concurrency on whatever is installed; a new minor must be re-verified.
VERIFIED_VERSIONS = ((3, 2, 0), (3, 3, 0))


class _PoolLock(asyncio.Lock):
    """Stand in for the instance lock: acquiring it never waits (each call has its own connection)."""

    async def acquire(self) -> Literal[True]:
        """Return at once."""
        return True

    def release(self) -> None:
        """Do nothing: nothing was held."""


def installed_version() -> tuple[int, int, int]:
    """Return the installed langgraph-checkpoint-postgres version as (major, minor, patch)."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version(PACKAGE))
    if found is None:
        raise RuntimeError(f"cannot read the version of {PACKAGE}: {version(PACKAGE)!r}")
    return int(found[1]), int(found[2]), int(found[3] or 0)


def check_version() -> None:
    """Raise unless the installed langgraph-checkpoint-postgres is a version this module was verified on."""
    low, high = VERIFIED_VERSIONS
    found = installed_version()
    if not low <= found < high:
        raise RuntimeError(
            f"{PACKAGE} {version(PACKAGE)} is installed, but chatbot.db.saver.PooledPostgresSaver was "
            f"verified on >={'.'.join(map(str, low))},<{'.'.join(map(str, high))}: re-run "
            "tests/db/test_saver.py and bench/runs.py, then widen VERIFIED_VERSIONS (or use "
            "AsyncPostgresSaver if the library no longer locks pooled savers)"
        )


# Reading a `DeltaChannel` walks back from the checkpoint to the channel's last snapshot;
# the library scans that walk in pages of 1024 checkpoint rows (each with a JSONB
# extraction and a blob probe), though our transcript channel snapshots every 50 updates
# (at most ~50 checkpoints back). A full first page made every run's two state loads
# cost more as the thread grew, up to 1024 checkpoints (aget_state: 1.6 ms at 10 turns,
# 36 ms at 1000). A smaller page reads what the walk needs; a longer walk just takes more
# pages (the loop pages until it finds the snapshot), so results are unchanged.
DELTA_WALK_PAGE = 64


def _tune_delta_walk_page() -> None:
    import langgraph.checkpoint.postgres.aio as library

    library._DELTA_PAGE_SIZE = DELTA_WALK_PAGE


class PooledPostgresSaver(AsyncPostgresSaver):
    """Checkpoint to Postgres like `AsyncPostgresSaver`, letting calls on a pool run concurrently."""

    def __init__(self, conn: Conn, pipe: AsyncPipeline | None = None, serde: SerializerProtocol | None = None) -> None:
        """Build the saver; on a pool, replace the instance lock by one that never waits."""
        check_version()
        _tune_delta_walk_page()
        super().__init__(conn, pipe, serde)
        # Only on a pool: a single shared connection (and a pipeline, which the library
        # allows only on one) still needs the lock to keep coroutines off it.
        if isinstance(conn, AsyncConnectionPool):
            self.lock = _PoolLock()
