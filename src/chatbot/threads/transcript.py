"""The transcript as the backend sees it: user and assistant messages read from the checkpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.serde.base import SerializerProtocol

from chatbot.agent.state import message_meta
from chatbot.db import langgraph_tables
from chatbot.db.pool import Pool
from chatbot.errors import Problem


def public_message(message: BaseMessage) -> dict[str, Any] | None:
    """Return the API form of a user or assistant message; None for anything else."""
    if isinstance(message, HumanMessage):
        role = "user"
    elif isinstance(message, AIMessage) and not message.tool_calls:
        role = "assistant"
    else:
        return None  # system prompts, tool traffic and chunk text never leave the service
    meta = message_meta(message)
    if not meta:
        return None  # a message this service did not write (e.g. a summary injected by a tool)
    return {
        "id": message.id,
        "role": role,
        "content": str(message.text),
        "created_at": meta.get("created_at"),
        "run_id": meta.get("run_id"),
        "citations": list(meta.get("citations", [])) if role == "assistant" else [],
    }


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a transcript, oldest first."""

    messages: list[dict[str, Any]]
    has_more: bool
    next_before: str | None


# Every version of the `turn` channel is a row of its own (see agent/state.py). A run
# writes `turn` twice (the user's message, then the message and the answer), so a later
# version restates an earlier one: the newest version of each message wins.
# Newest first, a batch at a time: the newest page costs the same at turn 1000 as at 10.
_AFTER_EVERY_VERSION = "a"  # sorts after every version (they start with a digit)


async def _newest_first(
    pool: Pool, serde: SerializerProtocol, thread_id: str, *, batch: int = 32
) -> AsyncIterator[BaseMessage]:
    """Yield the thread's messages newest first, reading the record a batch of versions at a time."""
    seen: set[str] = set()
    bound = _AFTER_EVERY_VERSION
    while True:
        async with pool.connection() as conn:
            rows = await langgraph_tables.turn_versions_before(conn, thread_id, bound, batch)
        for row in rows:
            if row["blob"] is None or row["type"] == "empty":
                continue
            for message in reversed(serde.loads_typed((row["type"], bytes(row["blob"]))) or []):
                if str(message.id) not in seen:  # the newest version of a message wins
                    seen.add(str(message.id))
                    yield message
        if len(rows) < batch:
            return
        bound = rows[-1]["version"]


async def read_page(pool: Pool, serde: SerializerProtocol, thread_id: str, *, limit: int, before: str | None) -> Page:
    """Return the newest `limit` user/assistant messages older than `before`, oldest first."""
    page: list[dict[str, Any]] = []
    reached = before is None
    has_more = False
    async for message in _newest_first(pool, serde, thread_id):
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
    return Page(page, has_more, page[0]["id"] if has_more and page else None)


async def read_messages(pool: Pool, serde: SerializerProtocol, thread_id: str) -> list[BaseMessage]:
    """Return every message of the thread, oldest first."""
    newest_first = [message async for message in _newest_first(pool, serde, thread_id)]
    return newest_first[::-1]
