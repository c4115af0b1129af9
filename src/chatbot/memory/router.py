"""`GET` and `DELETE /v1/users/{user_id}/memory`: what the store holds about the caller."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from chatbot.auth import CallerDep
from chatbot.caller import CallerContext
from chatbot.errors import Problem
from chatbot.memory.namespaces import PROFILE_KEY, facts_namespace, profile_namespace
from chatbot.memory.resets import reset_memory as reset_user_memory

router = APIRouter(prefix="/v1/users", tags=["memory"])

# Any other user than the token's is a 403, whatever its spelling: no pattern check here.
UserId = Annotated[str, Path(min_length=1, max_length=512)]


def require_self(user_id: str, caller: CallerContext) -> None:
    """Refuse (403) a call about another user than the token's."""
    if user_id != caller.user_id:
        raise Problem(403, "a token may only read or change its own user's data")


@router.get("/{user_id}/memory")
async def read_memory(request: Request, user_id: UserId, caller: CallerDep) -> dict[str, Any]:
    """Return the user's profile and facts in the token's tenant."""
    require_self(user_id, caller)
    store = request.app.state.store
    max_facts = request.app.state.settings.memory_max_facts
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
                "updated_at": item.updated_at.isoformat().replace("+00:00", "Z"),
            }
            for item in sorted(facts, key=lambda it: it.updated_at)
        ],
    }


@router.delete("/{user_id}/memory", status_code=204)
async def reset_memory(request: Request, user_id: UserId, caller: CallerDep) -> Response:
    """Remove the user's profile and facts in the token's tenant.

    Memory work submitted before this call, on any replica, never lands after it returns
    (memory/resets.py); this replica's queued jobs are dropped at once.
    """
    require_self(user_id, caller)
    state = request.app.state
    state.memory.forget(caller.tenant_id, user_id)
    await reset_user_memory(state.pool, caller.tenant_id, user_id)
    return Response(status_code=204)
