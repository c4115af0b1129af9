"""The holds of this process's calls in flight, renewed while it lives and released when it stops.

A hold expires `CHATBOT_BUDGET_RESERVATION_SECONDS` after it was last renewed, so a process
that dies (killed, its host gone) stops holding within that time, however long its calls
were to take; a live one moves the expiry on every third of it, one statement per tenant
with holds, pipelined on one connection. Closing releases what is still held: an
interrupted command's calls, which nothing else would settle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from datetime import datetime

from chatbot.budgets import queries
from chatbot.db.pool import Pool
from chatbot.ids import TenantId
from chatbot.tasks import stop_task

log = logging.getLogger(__name__)


class HoldKeeper:
    """Renews the live holds of one process; releases them when it closes."""

    def __init__(self, pool: Pool, *, every: float, expiry: Callable[[], datetime]) -> None:
        self.pool = pool
        self.every = every
        self.expiry = expiry
        self._live: dict[uuid.UUID, TenantId] = {}
        self._task: asyncio.Task[None] | None = None

    def keep(self, hold_id: uuid.UUID, tenant_id: TenantId) -> None:
        """Renew this hold until it is forgotten (settled)."""
        self._live[hold_id] = tenant_id
        self.start()

    def forget(self, hold_id: uuid.UUID) -> None:
        """Stop renewing a hold: it was settled."""
        self._live.pop(hold_id, None)

    def start(self) -> None:
        """Start the renewal loop in the running loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="budget-holds")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every)  # not polling: the renewal's period
            if not self._live:
                continue
            try:
                await self.renew()
            except Exception as exc:  # Postgres away: the holds expire unless a later round renews them
                log.warning("budget holds not renewed", extra={"error": type(exc).__name__})

    async def renew(self) -> None:
        """Move the expiry of every live hold on, one statement per tenant."""
        by_tenant: dict[TenantId, list[uuid.UUID]] = {}
        for hold_id, tenant in list(self._live.items()):
            by_tenant.setdefault(tenant, []).append(hold_id)
        expires = self.expiry()
        async with self.pool.connection() as conn, conn.pipeline():
            for tenant, ids in by_tenant.items():
                await queries.renew(conn, tenant, ids, expires)

    async def close(self) -> None:
        """Stop renewing and release every hold still live (settled to nothing)."""
        task, self._task = self._task, None
        await stop_task(task)
        live, self._live = self._live, {}
        if not live:
            return
        with contextlib.suppress(Exception):  # unreachable: the holds expire by themselves
            async with self.pool.connection() as conn, conn.pipeline():
                for hold_id, tenant in live.items():
                    await queries.settle(conn, tenant=tenant, reservation=hold_id, tokens=0, usd=0.0)
            log.info("budget holds released on close", extra={"holds": len(live)})
