"""Whose thread it is: the tenant and user recorded in its first checkpoint, nowhere else.

The owner is the caller whose run created the thread. It is read from the thread's first
checkpoint (checkpoint ids are time-ordered), so every replica and every call agrees on it,
and a run re-checks it under the thread lock before writing (threads/runs.py): two first
runs on one new thread id from different callers can never share the thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from chatbot.caller import CallerContext
from chatbot.db import langgraph_threads
from chatbot.db.pool import Pool
from chatbot.errors import Problem
from chatbot.ids import TenantId, ThreadId, UserId


@dataclass(frozen=True, slots=True)
class Owner:
    """The caller that created a thread."""

    tenant_id: TenantId
    user_id: UserId

    def is_caller(self, caller: CallerContext) -> bool:
        """Return True when `caller` is this owner."""
        return self.tenant_id == caller.tenant_id and self.user_id == caller.user_id


def belongs_to_another(owner: Owner | None, caller: CallerContext) -> bool:
    """Return True when the thread exists and another caller (tenant or user) created it."""
    return owner is not None and not owner.is_caller(caller)


async def thread_owner(pool: Pool, thread_id: ThreadId) -> Owner | None:
    """Return who created the thread, or None when the thread does not exist."""
    async with pool.connection() as conn:
        found = await langgraph_threads.first_checkpoint_owner(conn, thread_id)
    return None if found is None else Owner(*found)


def thread_not_found() -> Problem:
    """Return the 404 for a thread that does not exist or belongs to another caller."""
    return Problem(404, "thread not found")


async def check_thread_access(pool: Pool, thread_id: ThreadId, caller: CallerContext, *, must_exist: bool) -> bool:
    """Return whether the thread exists; raise 404 when it belongs to another caller.

    A thread of another tenant, or of another user of the same tenant, answers exactly
    like a missing one, so callers cannot probe each other's session ids.
    """
    return check_owner(await thread_owner(pool, thread_id), caller, must_exist=must_exist)


def check_owner(owner: Owner | None, caller: CallerContext, *, must_exist: bool) -> bool:
    """Return whether the thread of `owner` exists; raise 404 when it belongs to another caller."""
    if belongs_to_another(owner, caller):
        raise thread_not_found()
    if owner is None and must_exist:
        raise thread_not_found()
    return owner is not None
