"""`GET /v1/threads/{thread_id}/runs/{run_id}`: the run's record, for audits and disputed answers."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi import APIRouter
from psycopg_pool import PoolTimeout

from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep
from chatbot.deps import AUTHENTICATED, LocksDep, PoolDep, SaverDep
from chatbot.errors import database_problem
from chatbot.openapi import v1_problems
from chatbot.responses import RunRecord
from chatbot.threads.ownership import check_thread_access
from chatbot.threads.record import read_run_record
from chatbot.threads.schemas import NOT_A_RUN, RunId, ThreadId, run_not_found

router = APIRouter(prefix="/v1/threads", tags=["threads"], dependencies=AUTHENTICATED)


# `response_model=None`: the model documents the body, the handler's dict goes out unchanged.
@router.get(
    "/{thread_id}/runs/{run_id}",
    response_model=None,
    summary="Read a run's record: what the agent saw and said",
    responses={
        200: {"model": RunRecord, "content": {"application/json": {"examples": examples.RUN_RECORD}}},
        **v1_problems(404),
    },
)
async def get_run_record(
    thread_id: ThreadId,
    run_id: RunId,
    caller: CallerDep,
    pool: PoolDep,
    saver: SaverDep,
    locks: LocksDep,
) -> dict[str, Any]:
    """Return what the run's model was given and what it answered."""
    try:
        await check_thread_access(pool, thread_id, caller, must_exist=True)
        if run_id == NOT_A_RUN:
            raise run_not_found()
        record = await read_run_record(pool, saver.serde, locks, thread_id, run_id, caller.tenant_id)
    except (psycopg.OperationalError, PoolTimeout):
        raise database_problem(retry_after=1) from None
    if record is None:
        raise run_not_found()
    return record.body
