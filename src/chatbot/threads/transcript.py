"""The transcript as the backend sees it: user and assistant messages read from the checkpoints."""

from __future__ import annotations

from typing import Literal, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from chatbot.agent.state import message_meta
from chatbot.db.checkpoints import Checkpoints
from chatbot.db.pool import Pool
from chatbot.errors import Problem
from chatbot.ids import ThreadId


class PublicMessage(TypedDict):
    """A transcript message as the API sends it (responses.py `TranscriptMessage`, as stored)."""

    id: str | None
    role: Literal["user", "assistant"]
    content: str
    created_at: str | None
    run_id: str | None
    citations: list[str]


class Page(TypedDict):
    """One page of a transcript, oldest first: the API body (responses.py `MessagesPage`)."""

    messages: list[PublicMessage]
    has_more: bool
    next_before: str | None


def public_message(message: BaseMessage) -> PublicMessage | None:
    """Return the API form of a user or assistant message; None for anything else."""
    role: Literal["user", "assistant"]
    if isinstance(message, HumanMessage):
        role = "user"
    elif isinstance(message, AIMessage) and not message.tool_calls:
        role = "assistant"
    else:
        return None  # system prompts, tool traffic and chunk text never leave the service
    meta = message_meta(message)
    if not meta:
        return None  # a message this service did not write (e.g. a summary injected by a tool)
    return PublicMessage(
        id=message.id,
        role=role,
        content=str(message.text),
        created_at=meta.get("created_at"),
        run_id=meta.get("run_id"),
        citations=list(meta.get("citations", [])) if role == "assistant" else [],
    )


async def read_page(pool: Pool, thread_id: ThreadId, *, limit: int, before: str | None) -> Page:
    """Return the newest `limit` user/assistant messages older than `before`, oldest first."""
    page: list[PublicMessage] = []
    reached = before is None
    has_more = False
    async for message in Checkpoints(pool).messages_newest_first(thread_id):
        public = public_message(message)
        if public is None:
            continue
        if not reached:
            reached = public["id"] == before
            continue
        if len(page) == limit:
            has_more = True
            break
        page.append(public)
    if not reached:
        raise Problem(422, "unknown `before` message id")
    page.reverse()
    return Page(messages=page, has_more=has_more, next_before=page[0]["id"] if has_more and page else None)


async def read_messages(pool: Pool, thread_id: ThreadId) -> list[BaseMessage]:
    """Return every message of the thread, oldest first."""
    newest_first = [message async for message in Checkpoints(pool).messages_newest_first(thread_id)]
    return newest_first[::-1]
