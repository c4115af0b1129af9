"""A conversation turn: the service's metadata on a persisted message, and the thread's turns read back.

Every message this service writes (the user's, by threads/runs.py; an answer, by
agent/nodes.py) carries its metadata under one key of `additional_kwargs`. The window
strips it before a provider sees the message, the transcript and the export show it, the
summary names an answer's citations from it, recall indexes its time, and the run record
finds a run's messages by it. A message without it (a system prompt, tool traffic, a
summary a tool injected) never leaves the service. So the key, its typed shape, the one
rule for "is this a message of the conversation" and the one reader of a thread's turns
live here, below every feature that uses them; a second spelling would drift.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

import typing_extensions
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import TypeAdapter

from chatbot.db.checkpoints import Checkpoints
from chatbot.db.pool import Pool
from chatbot.ids import RunId, ThreadId

META_KEY = "chatbot"
"""The `additional_kwargs` key of our metadata on a persisted message (a stored format: never renamed)."""

Role = Literal["user", "assistant"]


# typing_extensions' TypedDict: the one pydantic validates on Python 3.11 (message_meta does).
class MessageMeta(typing_extensions.TypedDict, total=False):
    """Our metadata on a persisted message, under `additional_kwargs[META_KEY]`."""

    created_at: str
    """RFC 3339 (timestamps.py), when the message was written."""
    run_id: RunId
    """The run the message belongs to."""
    citations: list[str]
    """An answer's cited chunk ids."""
    status: str
    """An answer's status (responses.py `RunStatus`)."""


_MESSAGE_META: TypeAdapter[MessageMeta] = TypeAdapter(MessageMeta)


def message_meta(message: BaseMessage) -> MessageMeta:
    """Return our metadata stored on a persisted message (empty when absent)."""
    meta = message.additional_kwargs.get(META_KEY)
    # Written only as a MessageMeta (agent/nodes.py, threads/runs.py); LangChain keeps it as given,
    # and it comes back from the checkpoints: validated here, a key of another shape raises.
    return _MESSAGE_META.validate_python(meta) if isinstance(meta, dict) else MessageMeta()


def conversation_role(message: BaseMessage) -> Role | None:
    """Return a message's role in the conversation; None for one that never leaves the service.

    The conversation is the user's messages and the answers this service wrote: a message
    without our metadata (e.g. a summary injected by a tool), system prompts, tool calls
    and their results are not part of it.
    """
    if not message_meta(message):
        return None
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage) and not message.tool_calls:
        return "assistant"
    return None


def is_conversation_message(message: BaseMessage) -> bool:
    """Whether a message is one the transcript shows: the user's, or an answer this service wrote."""
    return conversation_role(message) is not None


async def conversation_turns(pool: Pool, thread_id: ThreadId) -> AsyncIterator[BaseMessage]:
    """Yield the thread's conversation messages (`is_conversation_message`), newest first, each once.

    Newest first, as the checkpoint reader gives them (db/checkpoints.py
    `messages_newest_first`, a batch of `turn` versions per statement): a reader of the
    latest page stops early and reads no older batch.
    """
    async for message in Checkpoints(pool).messages_newest_first(thread_id):
        if is_conversation_message(message):
            yield message
