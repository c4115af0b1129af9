"""`DELETE /v1/threads/{thread_id}`: the thread itself (its runs and messages have routers of their own)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from chatbot.auth import CallerDep
from chatbot.deps import AUTHENTICATED, LocksDep, PoolDep
from chatbot.openapi import no_content
from chatbot.threads.deletion import delete_callers_thread
from chatbot.threads.schemas import ThreadId

router = APIRouter(prefix="/v1/threads", tags=["threads"], dependencies=AUTHENTICATED)


@router.delete(
    "/{thread_id}",
    summary="Delete a thread",
    **no_content("Deleted, or there was nothing of the caller's to delete.", 409),
)
async def delete_thread(thread_id: ThreadId, caller: CallerDep, pool: PoolDep, locks: LocksDep) -> Response:
    """Purge the thread's checkpoints, blobs, writes and feedback (204 even if absent)."""
    await delete_callers_thread(pool, locks, thread_id, caller)
    return Response(status_code=204)
