"""`DELETE /v1/users/{user_id}`: erasure of one user in the caller's tenant."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from chatbot.auth import CallerDep
from chatbot.errors import Problem
from chatbot.memory.router import UserId, require_self
from chatbot.ops.erasure import ErasureBusy, erase_user

router = APIRouter(prefix="/v1/users", tags=["users"])


@router.delete("/{user_id}")
async def erase(request: Request, user_id: UserId, caller: CallerDep) -> dict[str, Any]:
    """Erase the user's threads, memory and feedback in the token's tenant."""
    require_self(user_id, caller)
    state = request.app.state
    state.memory.forget(caller.tenant_id, user_id)
    try:
        report = await erase_user(state.pool, state.locks, caller.tenant_id, user_id)
    except ErasureBusy:
        raise Problem(409, "a run or memory write of this user is still in flight; retry shortly") from None
    return {
        "threads_deleted": report.threads_deleted,
        "memory_items_deleted": report.memory_items_deleted,
        "feedback_deleted": report.feedback_deleted,
    }
