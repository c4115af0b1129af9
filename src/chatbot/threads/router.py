"""`DELETE /v1/threads/{thread_id}`: the thread itself (its runs and messages have routers of their own)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from chatbot.auth import CallerDep
from chatbot.deps import AUTHENTICATED, LocksDep, PoolDep
from chatbot.errors import Problem
from chatbot.openapi import no_content
from chatbot.threads._ownership import belongs_to_another, thread_owner
from chatbot.threads.deletion import delete_threads
from chatbot.threads.schemas import ThreadId

router = APIRouter(prefix="/v1/threads", tags=["threads"], dependencies=AUTHENTICATED)


@router.delete(
    "/{thread_id}",
    summary="Delete a thread",
    **no_content("Deleted, or there was nothing of the caller's to delete.", 409),
)
async def delete_thread(thread_id: ThreadId, caller: CallerDep, pool: PoolDep, locks: LocksDep) -> Response:
    """Purge the thread's checkpoints, blobs, writes and feedback (204 even if absent)."""
    owner = await thread_owner(pool, thread_id)
    if owner is None or belongs_to_another(owner, caller):
        # Nothing of the caller's to delete. Another caller's thread and a thread that does not
        # exist end here alike, after the same one statement and without the thread's lock:
        # neither the answer nor its timing tells them apart (docs/measurements/reliability.md), and another caller's
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
