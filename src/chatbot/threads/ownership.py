"""Which tenant a thread belongs to: recorded in its checkpoint metadata, nowhere else."""

from __future__ import annotations

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.errors import Problem

_OWNER = (
    "select metadata ->> 'tenant_id' as tenant_id from checkpoints where thread_id = %s and checkpoint_ns = '' limit 1"
)


async def thread_tenant(pool: Pool, thread_id: str) -> str | None:
    """Return the tenant that created the thread, or None when the thread does not exist."""
    async with pool.connection() as conn:
        row = await (await conn.execute(_OWNER, (thread_id,))).fetchone()
    return None if row is None else row["tenant_id"]


def thread_not_found() -> Problem:
    """Return the 404 for a thread that does not exist or belongs to another tenant."""
    return Problem(404, "thread not found")


async def check_thread_access(pool: Pool, thread_id: str, caller: CallerContext, *, must_exist: bool) -> bool:
    """Return whether the thread exists; raise 404 when it belongs to another tenant.

    A thread of another tenant answers exactly like a missing one, so tenants cannot
    probe each other's session ids.
    """
    tenant = await thread_tenant(pool, thread_id)
    if tenant is not None and tenant != caller.tenant_id:
        raise thread_not_found()
    if tenant is None and must_exist:
        raise thread_not_found()
    return tenant is not None
