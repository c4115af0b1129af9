"""A lease row: periodic maintenance that one replica at a time runs, once per interval.

Each replica tries to take the lease of a job when it wakes; the row says who holds it,
until when, and when the job last finished. A replica gets the lease only when nobody
holds it (or the holder's lease ran out: a killed replica stops renewing) and the job is
due (its interval has passed since it last finished anywhere), so N replicas together run
it about once per interval, never two at once. Plain rows and one-statement transactions:
nothing here depends on session state, so it works through PgBouncer in transaction mode
and cannot leak like a session lock.
"""

from __future__ import annotations

import os
import socket
import uuid

from chatbot.db.pool import Pool
from chatbot.ops import queries


class MaintenanceLeaseLost(Exception):
    """The lease ran out before it was renewed (another replica may hold it now)."""


def replica_name() -> str:
    """Return a name for this process's lease holder: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class MaintenanceLease:
    """The lease of one named job, as one holder sees it."""

    def __init__(self, pool: Pool, name: str, *, holder: str, lease_seconds: float, every_seconds: float) -> None:
        self.pool = pool
        self.name = name
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.every_seconds = every_seconds

    def _params(self) -> dict[str, object]:
        return {"name": self.name, "holder": self.holder, "lease": self.lease_seconds, "every": self.every_seconds}

    async def acquire(self) -> bool:
        """Take the lease if it is free and the job is due; return whether this holder has it."""
        async with self.pool.connection() as conn:
            return await queries.acquire_lease(conn, self._params())

    async def renew(self) -> None:
        """Extend the lease; raise MaintenanceLeaseLost when it already ran out."""
        async with self.pool.connection() as conn:
            if not await queries.renew_lease(conn, self._params()):
                raise MaintenanceLeaseLost(self.name)

    async def finish(self) -> None:
        """Release the lease and record the job as done now (the next run is due an interval later)."""
        async with self.pool.connection() as conn:
            await queries.finish_lease(conn, self._params())

    async def give_up(self) -> None:
        """Release the lease without recording a finished run (a failed one is due again at once)."""
        async with self.pool.connection() as conn:
            await queries.give_up_lease(conn, self._params())
