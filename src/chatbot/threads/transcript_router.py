"""Messages, deletion and feedback endpoints of a thread."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep
from chatbot.deps import AUTHENTICATED, LocksDep, PoolDep, SaverDep
from chatbot.errors import Problem
from chatbot.json_body import StrictJsonRoute
from chatbot.openapi import v1_problems
from chatbot.responses import MessagesPage
from chatbot.threads.deletion import delete_threads
from chatbot.threads.feedback import run_exists, save_feedback
from chatbot.threads.ownership import belongs_to_another, check_thread_access, thread_owner
from chatbot.threads.schemas import NOT_A_RUN, FeedbackRequest, RunId, ThreadId, run_not_found
from chatbot.threads.transcript import read_page

# Bodies are read as strict UTF-8 JSON (json_body.py).
router = APIRouter(prefix="/v1/threads", tags=["threads"], dependencies=AUTHENTICATED, route_class=StrictJsonRoute)


# The typed models document the bodies (`responses`) without re-serialising them
# (`response_model=None`): the handlers' dicts go out as they are, byte for byte (a
# response model would rewrite `created_at`'s milliseconds, for one).
@router.get(
    "/{thread_id}/messages",
    response_model=None,
    summary="Read the thread's transcript, a page at a time",
    responses={
        200: {"model": MessagesPage, "content": {"application/json": {"examples": examples.MESSAGES_PAGE}}},
        **v1_problems(404),
    },
)
async def list_messages(
    thread_id: ThreadId,
    caller: CallerDep,
    pool: PoolDep,
    saver: SaverDep,
    limit: Annotated[int, Query(ge=1, le=100, description="Messages per page.")] = 20,
    before: Annotated[
        str | None,
        Query(min_length=1, max_length=128, description="A message id of this thread: the page ends before it."),
    ] = None,
) -> dict[str, Any]:
    """Return one page of the thread's user and assistant messages, oldest first."""
    await check_thread_access(pool, thread_id, caller, must_exist=True)
    page = await read_page(pool, saver.serde, thread_id, limit=limit, before=before)
    return {"messages": page.messages, "has_more": page.has_more, "next_before": page.next_before}


@router.delete(
    "/{thread_id}",
    status_code=204,
    summary="Delete a thread",
    responses={204: {"description": "Deleted, or there was nothing of the caller's to delete."}, **v1_problems(409)},
)
async def delete_thread(thread_id: ThreadId, caller: CallerDep, pool: PoolDep, locks: LocksDep) -> Response:
    """Purge the thread's checkpoints, blobs, writes and feedback (204 even if absent)."""
    owner = await thread_owner(pool, thread_id)
    if owner is None or belongs_to_another(owner, caller):
        # Nothing of the caller's to delete. Another caller's thread and a thread that does not
        # exist end here alike, after the same one statement and without the thread's lock:
        # neither the answer nor its timing tells them apart (docs/reliability.md), and another caller's
        # refused request never makes the owner's runs meet a 409. A first run that holds the
        # lock but has not written yet is a thread that does not exist yet: 204 (docs/api.md).
        return Response(status_code=204)
    lease = await locks.try_thread(thread_id)
    if lease is None:
        raise Problem(409, "a run is in flight on this thread")
    try:
        # Again under the lock: the thread may have been deleted and begun again by another caller since.
        if not belongs_to_another(await thread_owner(pool, thread_id), caller):
            await delete_threads(pool, [thread_id])
    finally:
        await lease.release()
    return Response(status_code=204)


@router.post(
    "/{thread_id}/runs/{run_id}/feedback",
    status_code=204,
    summary="Rate a run",
    responses={204: {"description": "Recorded (replacing the run's earlier feedback)."}, **v1_problems(404)},
)
async def post_feedback(
    thread_id: ThreadId,
    run_id: RunId,
    body: Annotated[FeedbackRequest, Body(openapi_examples=examples.FEEDBACK_REQUEST)],
    caller: CallerDep,
    pool: PoolDep,
) -> Response:
    """Record (or replace) the user's rating of one run."""
    await check_thread_access(pool, thread_id, caller, must_exist=True)
    if run_id == NOT_A_RUN or not await run_exists(pool, thread_id, run_id, caller.tenant_id):
        raise run_not_found()
    await save_feedback(pool, thread_id, run_id, caller, body.score, body.comment)
    return Response(status_code=204)
