"""`GET /v1/threads/{thread_id}/messages`: the thread's transcript, a page at a time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep
from chatbot.deps import AUTHENTICATED, PoolDep
from chatbot.openapi import json_answer
from chatbot.responses import MessagesPage
from chatbot.threads._ownership import check_thread_access
from chatbot.threads.schemas import ThreadId
from chatbot.threads.transcript import read_page

router = APIRouter(prefix="/v1/threads/{thread_id}/messages", tags=["threads"], dependencies=AUTHENTICATED)


@router.get(
    "",
    summary="Read the thread's transcript, a page at a time",
    responses=json_answer(examples.MESSAGES_PAGE, 404),
)
async def list_messages(
    thread_id: ThreadId,
    caller: CallerDep,
    pool: PoolDep,
    limit: Annotated[int, Query(ge=1, le=100, description="Messages per page.")] = 20,
    before: Annotated[
        str | None,
        Query(min_length=1, max_length=128, description="A message id of this thread: the page ends before it."),
    ] = None,
) -> MessagesPage:
    """Return one page of the thread's user and assistant messages, oldest first."""
    await check_thread_access(pool, thread_id, caller, must_exist=True)
    return await read_page(pool, thread_id, limit=limit, before=before)
