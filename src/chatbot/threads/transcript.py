"""The transcript as the backend sees it: user and assistant messages read from the checkpoints.

Which messages those are, and how they are read, is chatbot/turns.py's (`conversation_turns`).
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from chatbot.db.checkpoints import Checkpoints
from chatbot.db.pool import Pool
from chatbot.errors import Problem
from chatbot.ids import ThreadId
from chatbot.responses import MessagesPage, TranscriptMessage
from chatbot.turns import conversation_role, conversation_turns, message_meta


def _public(message: BaseMessage) -> TranscriptMessage:
    role = conversation_role(message)
    assert role is not None, "conversation_turns yields only the user's messages and answers"
    meta = message_meta(message)
    # This service writes every message with an id and `created_at` (agent/nodes.py, threads/runs.py).
    return TranscriptMessage(
        id=str(message.id),
        role=role,
        content=str(message.text),
        created_at=meta["created_at"],
        run_id=meta.get("run_id"),
        citations=list(meta.get("citations", [])) if role == "assistant" else [],
    )


async def read_page(pool: Pool, thread_id: ThreadId, *, limit: int, before: str | None) -> MessagesPage:
    """Return the newest `limit` user/assistant messages older than `before`, oldest first."""
    page: list[TranscriptMessage] = []
    reached = before is None
    has_more = False
    async for message in conversation_turns(pool, thread_id):
        if not reached:
            reached = message.id == before
            continue
        if len(page) == limit:
            has_more = True
            break
        page.append(_public(message))
    if not reached:
        raise Problem(422, "unknown `before` message id")
    page.reverse()
    return MessagesPage(messages=page, has_more=has_more, next_before=page[0].id if has_more and page else None)


async def read_messages(pool: Pool, thread_id: ThreadId) -> list[BaseMessage]:
    """Return every message of the thread, oldest first."""
    newest_first = [message async for message in Checkpoints(pool).messages_newest_first(thread_id)]
    return newest_first[::-1]
