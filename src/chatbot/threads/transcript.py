"""The transcript as the backend sees it: user and assistant messages read from the checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.serde.base import SerializerProtocol

from chatbot.agent.nodes import text_of
from chatbot.agent.state import message_meta
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
        "content": text_of(message),
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


def page_of(messages: Sequence[dict[str, Any]], *, limit: int, before: str | None) -> Page:
    """Return the newest `limit` messages older than `before` (or the newest overall)."""
    end = len(messages)
    if before is not None:
        for index, message in enumerate(messages):
            if message["id"] == before:
                end = index
                break
        else:
            raise Problem(422, "unknown `before` message id")
    start = max(0, end - limit)
    page = list(messages[start:end])
    has_more = start > 0
    return Page(page, has_more, page[0]["id"] if has_more and page else None)


# Every version of the `turn` channel is a row of its own (see agent/state.py). Versions
# are "<zero-padded counter>.<random>"; the counter orders them.
_TURN_VERSIONS = (
    "select version, type, blob from checkpoint_blobs where thread_id = %s and checkpoint_ns = '' and channel = 'turn'"
)


def _version_order(version: str) -> int:
    return int(version.split(".", 1)[0])


async def read_messages(pool: Pool, serde: SerializerProtocol, thread_id: str) -> list[BaseMessage]:
    """Return every message of the thread, oldest first, from the kept versions of `turn`.

    A run writes `turn` twice (the user's message, then the message and the answer), so a
    later version restates an earlier one: messages are merged by id, in first-seen order.
    """
    async with pool.connection() as conn:
        rows = await (await conn.execute(_TURN_VERSIONS, (thread_id,))).fetchall()
    rows.sort(key=lambda row: _version_order(row["version"]))
    by_id: dict[str, BaseMessage] = {}
    for row in rows:
        if row["blob"] is None or row["type"] == "empty":
            continue
        for message in serde.loads_typed((row["type"], bytes(row["blob"]))) or []:
            by_id[str(message.id)] = message  # dicts keep first-insertion order on update
    return list(by_id.values())


async def read_transcript(pool: Pool, serde: SerializerProtocol, thread_id: str) -> list[dict[str, Any]]:
    """Return every user and assistant message of the thread in its API form, oldest first."""
    out = []
    for message in await read_messages(pool, serde, thread_id):
        public = public_message(message)
        if public is not None:
            out.append(public)
    return out
