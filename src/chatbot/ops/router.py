"""`DELETE /v1/users/{user_id}`: erasure of one user in the caller's tenant."""

from __future__ import annotations

from fastapi import APIRouter

from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep, UserId, require_self
from chatbot.deps import AUTHENTICATED, LocksDep, PoolDep
from chatbot.errors import Problem
from chatbot.memory.deps import MemoryDep
from chatbot.openapi import json_answer
from chatbot.ops.erasure import ErasureBusy, erase_user
from chatbot.responses import ErasureReport

router = APIRouter(prefix="/v1/users", tags=["users"], dependencies=AUTHENTICATED)


@router.delete(
    "/{user_id}",
    summary="Erase the user in the token's tenant",
    responses=json_answer(examples.ERASURE_REPORT, 403, 409),
)
async def erase(user_id: UserId, caller: CallerDep, pool: PoolDep, locks: LocksDep, memory: MemoryDep) -> ErasureReport:
    """Erase the user's threads, memory and feedback in the token's tenant."""
    require_self(user_id, caller)
    try:
        return await erase_user(pool, locks, caller.tenant_id, user_id, drop_queued=memory.forget)
    except ErasureBusy:
        raise Problem(409, "a run or memory write of this user is still in flight; retry shortly") from None
