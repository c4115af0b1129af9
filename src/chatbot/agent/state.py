"""The conversation state persisted in checkpoints.

`messages` is the whole transcript and is never trimmed in state (trimming happens only
when the model window is built). It lives in a `DeltaChannel`: a stock `add_messages`
channel stores the whole list again at every version, so the bytes each turn adds grow
with the thread (50 turns = 2.5 MB, DESIGN.md); a delta channel stores only the turn's new
messages plus a periodic snapshot, so a turn costs the same at turn 500 as at turn 5.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import add_messages

Status = Literal["answered", "clarifying", "escalate"]
META_KEY = "chatbot"  # additional_kwargs key of our per-message metadata


def add_message_batches(current: list[AnyMessage], batches: Sequence[Any]) -> list[AnyMessage]:
    """Fold write batches into the transcript with `add_messages` semantics.

    `DeltaChannel` replays many writes in one call; folding them one by one keeps the
    result independent of how writes were batched, which the channel requires.
    """
    merged: list[AnyMessage] = list(current)
    for batch in batches:
        merged = add_messages(merged, batch)  # type: ignore[assignment,arg-type]
    return merged


class Outcome(TypedDict, total=False):
    """How this turn ended: read by the runs endpoint to build the `end` event."""

    status: Status
    message_id: str
    content: str
    citations: list[str]
    handoff_context: dict[str, Any] | None


class ConversationState(TypedDict, total=False):
    """State of one thread."""

    messages: Annotated[list[AnyMessage], DeltaChannel(add_message_batches, snapshot_frequency=50)]
    summary: str
    """Rolling summary of the turns that fell out of the model window."""
    summarized_upto: int
    """Number of leading messages the summary covers, so each fold reads only new ones."""
    retrieved_chunks: list[dict[str, Any]]
    """This turn's chunks (text included); reset every turn and cleared once answered."""
    profile: dict[str, Any]
    """The user's profile as loaded this turn (long-term memory lives in the store)."""
    facts: list[str]
    """The user's remembered facts as loaded this turn."""
    outcome: Outcome
    """This turn's result; overwritten every turn."""
    unanswered_streak: int
    """Consecutive turns that could not be answered; escalates when it keeps growing."""


def now_rfc3339() -> str:
    """Return the current UTC time as RFC 3339 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def message_meta(message: BaseMessage) -> dict[str, Any]:
    """Return our metadata stored on a persisted message (empty when absent)."""
    meta = message.additional_kwargs.get(META_KEY)
    return meta if isinstance(meta, dict) else {}
