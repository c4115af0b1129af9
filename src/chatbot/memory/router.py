"""`GET` and `DELETE /v1/users/{user_id}/memory`: what the store holds about the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep, UserId, require_self
from chatbot.deps import AUTHENTICATED, PoolDep, SettingsDep
from chatbot.errors import Problem
from chatbot.memory.deps import MemoryDep
from chatbot.memory.read import user_memory
from chatbot.memory.resets import forget_fact as forget_user_fact
from chatbot.memory.resets import reset_memory as reset_user_memory
from chatbot.memory.schemas import NOT_A_FACT, FactId
from chatbot.openapi import json_answer, no_content
from chatbot.responses import UserMemory

router = APIRouter(prefix="/v1/users/{user_id}/memory", tags=["memory"], dependencies=AUTHENTICATED)


@router.get(
    "",
    # Unset: `history` stays out of the body unless it was asked for (memory/read.py).
    response_model_exclude_unset=True,
    summary="Read what is remembered about the user",
    responses=json_answer(examples.USER_MEMORY, 403),
)
async def read_memory(
    user_id: UserId,
    caller: CallerDep,
    pool: PoolDep,
    settings: SettingsDep,
    memory: MemoryDep,
    history: Annotated[
        bool, Query(description="Add `history`: every fact with when it was believed, closed ones too.")
    ] = False,
) -> UserMemory:
    """Return the user's profile and current facts in the token's tenant, each fact with the run that last wrote it.

    With `history=true`, also what was believed when: the current facts and the ones a later
    fact of the same kind closed, each with the runs that wrote and closed it, oldest first.
    """
    require_self(user_id, caller)
    return await user_memory(
        pool,
        caller.tenant_id,
        user_id,
        max_facts=settings.memory_max_facts,
        lifetime=memory.lifetime,
        history=history,
    )


@router.delete(
    "/facts/{fact_id}",
    summary="Forget one remembered fact",
    **no_content(
        "The fact is gone, with its closed versions and the profile entries that came only from it; "
        "the user's other facts and profile stay.",
        403,
        404,
    ),
)
async def forget_fact(
    user_id: UserId, fact_id: FactId, caller: CallerDep, pool: PoolDep, memory: MemoryDep
) -> Response:
    """Remove one of the user's facts in the token's tenant (404 when the user has no such fact).

    Its closed versions go with it, and so do the profile entries that came only from it.
    """
    require_self(user_id, caller)
    if fact_id == NOT_A_FACT or not await forget_user_fact(pool, caller.tenant_id, user_id, fact_id, memory.lifetime):
        raise Problem(404, "the user has no such fact")
    return Response(status_code=204)


@router.delete(
    "",
    summary="Forget the user's profile and facts",
    **no_content("The user's memory in the token's tenant is gone.", 403),
)
async def reset_memory(user_id: UserId, caller: CallerDep, pool: PoolDep, memory: MemoryDep) -> Response:
    """Remove the user's profile and facts in the token's tenant.

    Memory work submitted before this call, on any replica, never lands after it returns
    (memory/resets.py); this replica's queued jobs are dropped at once.
    """
    require_self(user_id, caller)
    await reset_user_memory(pool, caller.tenant_id, user_id, drop_queued=memory.forget)
    return Response(status_code=204)
