"""`GET` and `DELETE /v1/users/{user_id}/memory`: what the store holds about the caller."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response

from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep
from chatbot.caller import CallerContext
from chatbot.deps import AUTHENTICATED, PoolDep, SettingsDep, StoreDep
from chatbot.errors import Problem
from chatbot.memory.deps import MemoryDep
from chatbot.memory.namespaces import PROFILE_KEY, facts_namespace, profile_namespace
from chatbot.memory.resets import reset_memory as reset_user_memory
from chatbot.openapi import v1_problems
from chatbot.responses import UserMemory
from chatbot.timestamps import rfc3339

router = APIRouter(prefix="/v1/users", tags=["memory"], dependencies=AUTHENTICATED)

# Any other user than the token's is a 403, whatever its spelling: no pattern check here.
UserId = Annotated[str, Path(min_length=1, max_length=512, description="Must be the token's `user_id` (else 403).")]


def require_self(user_id: str, caller: CallerContext) -> None:
    """Refuse (403) a call about another user than the token's."""
    if user_id != caller.user_id:
        raise Problem(403, "a token may only read or change its own user's data")


# `response_model=None`: the model documents the body, the handler's dict goes out unchanged.
@router.get(
    "/{user_id}/memory",
    response_model=None,
    summary="Read what is remembered about the user",
    responses={
        200: {"model": UserMemory, "content": {"application/json": {"examples": examples.USER_MEMORY}}},
        **v1_problems(403),
    },
)
async def read_memory(user_id: UserId, caller: CallerDep, store: StoreDep, settings: SettingsDep) -> dict[str, Any]:
    """Return the user's profile and facts in the token's tenant."""
    require_self(user_id, caller)
    max_facts = settings.memory_max_facts
    profile = await store.aget(profile_namespace(caller.tenant_id, user_id), PROFILE_KEY)
    facts = await store.asearch(facts_namespace(caller.tenant_id, user_id), limit=max_facts)
    return {
        "user_id": user_id,
        "profile": dict(profile.value) if profile else {},
        "facts": [
            {
                "id": item.key,
                "text": item.value.get("text", ""),
                "category": item.value.get("category", "general"),
                "updated_at": rfc3339(item.updated_at, timespec="auto"),
            }
            for item in sorted(facts, key=lambda it: it.updated_at)
        ],
    }


@router.delete(
    "/{user_id}/memory",
    status_code=204,
    summary="Forget the user's profile and facts",
    responses={204: {"description": "The user's memory in the token's tenant is gone."}, **v1_problems(403)},
)
async def reset_memory(user_id: UserId, caller: CallerDep, pool: PoolDep, memory: MemoryDep) -> Response:
    """Remove the user's profile and facts in the token's tenant.

    Memory work submitted before this call, on any replica, never lands after it returns
    (memory/resets.py); this replica's queued jobs are dropped at once.
    """
    require_self(user_id, caller)
    memory.forget(caller.tenant_id, user_id)
    await reset_user_memory(pool, caller.tenant_id, user_id)
    return Response(status_code=204)
