"""The conversation state persisted in checkpoints.

Two channels hold the conversation, for two readers:
- `messages` is the model's view: the most recent `RECENT_MESSAGES` messages. A stock
  `add_messages` channel stores the whole list again at every version and makes every run
  load and deserialise the whole thread (50 turns = 2.5 MB, measured; a run at turn 500
  took 4x a run at turn 50 here). Bounded, in a `DeltaChannel` that stores only each
  write plus a periodic snapshot, a turn costs the same at turn 500 as at turn 5.
- `turn` is the record: this run's messages (the user's, then the answer). It is a plain
  last-value channel, and the checkpointer keeps every version of it as a row of its own,
  so the versions in order are the whole transcript; `threads/transcript.py` reads them.
  Nothing is trimmed from the record; trimming happens only when the model window is built.

`record` is the run record (agent/record.py): ids, hashes and settings, no text. Chunk
text never enters a channel: `retrieved` holds (chunk id, version) pairs and the text
goes from `retrieve` to `generate` through the run's context (agent/context.py), so not
even a run that fails after retrieval leaves chunk text in a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypedDict

import typing_extensions
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import add_messages
from pydantic import JsonValue, TypeAdapter

from chatbot.responses import RunStatus

META_KEY = "chatbot"  # additional_kwargs key of our per-message metadata


# The model window sees at most WINDOW_HISTORY messages (30 turns; older ones reach it
# through the rolling summary). The recent list keeps a margin beyond that from which the
# summary folds messages, FOLD_BATCH at a time, before the list drops them.
WINDOW_HISTORY = 60
FOLD_BATCH = 8
RECENT_MESSAGES = WINDOW_HISTORY + 2 * FOLD_BATCH + 4


def add_recent_batches(current: list[AnyMessage], batches: Sequence[Any]) -> list[AnyMessage]:
    """Fold write batches in with `add_messages` semantics and keep the newest messages.

    `DeltaChannel` replays many writes in one call, so the reducer must not depend on how
    writes were batched: folding them one by one and keeping the last N does not (the last
    N of the last N plus more is the last N of everything), as messages are only appended.
    """
    merged: list[AnyMessage] = list(current)
    for batch in batches:
        merged = add_messages(merged, batch)  # type: ignore[assignment,arg-type]
    return merged[-RECENT_MESSAGES:]


def user_turn(message: HumanMessage) -> ConversationState:
    """Return the state update that records the user's message of a new run.

    It also empties `record`: otherwise the new run's first checkpoint would store the
    previous run's record (a string, kept inline) a second time.
    """
    return ConversationState(messages=[message], turn=[message], record="")


class StoredFailure(TypedDict):
    """Why a run failed, as the `outcome` channel keeps it (chatbot/failures.py `Failure`)."""

    reason: str
    retry_after: float | None


class Outcome(TypedDict, total=False):
    """How this turn ended: read by the runs endpoint to build the `end` (or `error`) event."""

    status: RunStatus | Literal["error"]
    failure: StoredFailure
    """On `error`."""
    message_id: str | None
    citations: list[str]
    handoff_context: dict[str, JsonValue] | None
    """responses.py `HandoffContext`, dumped."""


class ConversationState(TypedDict, total=False):
    """State of one thread."""

    messages: Annotated[list[AnyMessage], DeltaChannel(add_recent_batches, snapshot_frequency=50)]
    """The most recent messages, oldest first: what the model window is built from."""
    turn: list[AnyMessage]
    """This run's messages; every version is kept, and in order they are the transcript."""
    turns: int
    """Runs that reached `generate` on this thread (counted, as the transcript is not loaded)."""
    summary: str
    """Rolling summary of the turns that fell out of the model window."""
    summarized_through: str
    """Id of the newest message the summary covers, so each fold reads only newer ones."""
    retrieved: list[list[Any]]
    """This turn's chunks as [chunk_id, version] pairs, ids only; reset every turn."""
    record: str
    """This run's record, JSON (agent/record.py); a string, so it is stored inline in the checkpoint."""
    profile: dict[str, JsonValue]
    """The user's profile as loaded this turn (long-term memory lives in the store)."""
    facts: list[str]
    """The user's remembered facts as loaded this turn."""
    outcome: Outcome
    """This turn's result; overwritten every turn."""
    unanswered_streak: int
    """Consecutive turns that could not be answered; escalates when it keeps growing."""


# typing_extensions' TypedDict: the one pydantic validates on Python 3.11 (message_meta does).
class MessageMeta(typing_extensions.TypedDict, total=False):
    """Our metadata on a persisted message, under `additional_kwargs[META_KEY]`."""

    created_at: str
    """RFC 3339 (timestamps.py), when the message was written."""
    run_id: str
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
