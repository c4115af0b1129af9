"""`GET /v1/threads/{thread_id}/runs/{run_id}`: the run's record, for audits and disputed answers."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Path, Request
from psycopg_pool import PoolTimeout

from chatbot.auth import CallerDep
from chatbot.errors import Problem
from chatbot.threads.ownership import check_thread_access
from chatbot.threads.record import read_run_record
from chatbot.threads.schemas import ThreadId

router = APIRouter(prefix="/v1/threads", tags=["threads"])


@router.get("/{thread_id}/runs/{run_id}")
async def get_run_record(
    request: Request, thread_id: ThreadId, run_id: Annotated[str, Path()], caller: CallerDep
) -> dict[str, Any]:
    """Return what the run's model was given and what it answered."""
    state = request.app.state
    try:
        await check_thread_access(state.pool, thread_id, caller, must_exist=True)
        try:
            # Run ids are UUIDs we made: any other string, however long, names no run (404, not 422).
            canonical = str(uuid.UUID(run_id[:64]))
        except ValueError:
            raise Problem(404, "run not found on this thread") from None
        record = await read_run_record(
            state.pool, state.saver.serde, state.locks, thread_id, canonical, caller.tenant_id
        )
    except (psycopg.OperationalError, PoolTimeout):
        raise Problem(503, "the database is unavailable", headers={"Retry-After": "1"}) from None
    if record is None:
        raise Problem(404, "run not found on this thread")
    return record.body
