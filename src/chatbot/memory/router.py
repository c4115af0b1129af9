"""`GET` and `DELETE /v1/users/{user_id}/memory`: what the store holds about the caller."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep, UserId, require_self
from chatbot.deps import AUTHENTICATED, PoolDep, SettingsDep
from chatbot.errors import Problem
from chatbot.memory.deps import MemoryDep
from chatbot.memory.read import read_history
from chatbot.memory.read import read_memory as read_user_memory
from chatbot.memory.resets import forget_fact as forget_user_fact
from chatbot.memory.resets import reset_memory as reset_user_memory
from chatbot.memory.schemas import NOT_A_FACT, FactId
from chatbot.openapi import json_as_returned, no_content
from chatbot.responses import UserMemory
from chatbot.timestamps import rfc3339

# Closed facts shown (the writer keeps at most 100 per user).
HISTORY_LIMIT = 200

router = APIRouter(prefix="/v1/users/{user_id}/memory", tags=["memory"], dependencies=AUTHENTICATED)


@router.get(
    "",
    summary="Read what is remembered about the user",
    **json_as_returned(UserMemory, examples.USER_MEMORY, 403),
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
) -> dict[str, Any]:
    """Return the user's profile and current facts in the token's tenant, each fact with the run that last wrote it.

    With `history=true`, also what was believed when: the current facts and the ones a later
    fact of the same kind closed, each with the runs that wrote and closed it, oldest first.
    """
    require_self(user_id, caller)
    found = await read_user_memory(
        pool, caller.tenant_id, user_id, max_facts=settings.memory_max_facts, lifetime=memory.lifetime
    )
    facts = sorted(found.facts, key=lambda it: it.updated_at)
    body: dict[str, Any] = {
        "user_id": user_id,
        "profile": found.profile,
        "facts": [
            {
                "id": item.key,
                "text": item.value.get("text", ""),
                "category": item.value.get("category", "general"),
                "updated_at": rfc3339(item.updated_at, timespec="auto"),
                "source": _source(item.value.get("source")),
            }
            for item in facts
        ],
    }
    if history:
        closed = await read_history(pool, caller.tenant_id, user_id, limit=HISTORY_LIMIT, lifetime=memory.lifetime)
        entries = [_version(item.key, item.value, item.created_at, closed=True) for item in closed]
        entries += [_version(item.key, item.value, item.created_at, closed=False) for item in facts]
        body["history"] = sorted(entries, key=_believed)
    return body


def _believed(entry: dict[str, Any]) -> tuple[datetime, datetime]:
    """Order history entries by when they began to be believed, then by when that ended (current last)."""
    until = entry["valid_until"]
    return datetime.fromisoformat(entry["valid_from"]), datetime.fromisoformat(
        until
    ) if until else datetime.max.replace(tzinfo=UTC)


def _version(key: str, value: dict[str, Any], created_at: datetime, *, closed: bool) -> dict[str, Any]:
    """Return one history entry: a fact with when it was believed and the runs that wrote and closed it."""
    since = value.get("valid_from")
    return {
        "id": key,
        "text": value.get("text", ""),
        "category": value.get("category", "general"),
        "valid_from": since if isinstance(since, str) and since else rfc3339(created_at, timespec="microseconds"),
        "valid_until": value.get("valid_until") if closed else None,
        "source": _source(value.get("source")),
        "closed_by": _source(value.get("closed_by")) if closed else None,
    }


def _source(value: object) -> dict[str, str] | None:
    """Return a fact's source as stored, None for facts written before sources were kept."""
    if not isinstance(value, dict) or not value.get("thread_id") or not value.get("run_id"):
        return None
    return {"thread_id": str(value["thread_id"]), "run_id": str(value["run_id"])}


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
    memory.forget(caller.tenant_id, user_id)
    await reset_user_memory(pool, caller.tenant_id, user_id)
    return Response(status_code=204)
