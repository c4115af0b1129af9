"""What a run of the graph gives its caller, as types: the events it emits and how it ended.

The run service (threads/runs.py) and the evaluation's dry run read these, never the
graph's node names or state keys: `outcome_of` is the one reader of the `generate` node's
update, and `GraphOutcome.stored` / `from_stored` the one mapping to the `outcome` channel
(its stored format is unchanged: a dict in every checkpoint written so far).

Events reach the caller through the run context's `events` sink when it gives one: a call
per event, on the node's own task (the service hands tokens straight to the run's stream,
without the graph's custom stream and its queue: two event-loop hops fewer per token). A
graph run without a sink (LangGraph Studio, the benches) gets the same events on its custom
stream, as `{"event": name, "data": {...}}`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import JsonValue

from chatbot.agent.state import ConversationState, Outcome, StoredFailure
from chatbot.failures import Failure
from chatbot.responses import HandoffContext, RunStatus

OutcomeStatus = RunStatus | Literal["error"]


@dataclass(frozen=True, slots=True)
class Token:
    """A piece of the answer, as the user is shown it."""

    name: ClassVar[str] = "token"
    content: str

    def data(self) -> dict[str, JsonValue]:
        """Return the event's data as the stream sends it."""
        return {"content": self.content}


@dataclass(frozen=True, slots=True)
class StageProgress:
    """A stage of the run started (`status`) or found something (`chunks`)."""

    name: ClassVar[str] = "progress"
    stage: str
    status: str | None = None
    chunks: int | None = None

    def data(self) -> dict[str, JsonValue]:
        """Return the event's data as the stream sends it (only the fields the stage set)."""
        data: dict[str, JsonValue] = {"stage": self.stage}
        if self.status is not None:
            data["status"] = self.status
        if self.chunks is not None:
            data["chunks"] = self.chunks
        return data


GraphEvent = Token | StageProgress
EventSink = Callable[[GraphEvent], None]
"""Takes the graph's events as they happen; must not block (it runs on the node's task)."""


def custom_stream_sink(writer: Callable[[Any], None]) -> EventSink:
    """Return a sink writing events to LangGraph's custom stream, in the shape it always had."""
    return lambda event: writer({"event": event.name, "data": event.data()})


@dataclass(frozen=True, slots=True)
class GraphOutcome:
    """How a run's turn ended: its status, and the answer or the failure."""

    status: OutcomeStatus
    answer: str = ""
    """The answer's text (empty when the run failed)."""
    message_id: str | None = None
    citations: list[str] = field(default_factory=list)
    handoff_context: HandoffContext | None = None
    """What a human assistant needs to take over, when `status` is `escalate`."""
    failure: Failure | None = None
    """Why the run failed, when `status` is `error`."""

    def stored(self) -> Outcome:
        """Return the outcome as the `outcome` channel stores it."""
        if self.status == "error":
            failure = self.failure or Failure("internal")
            stored = StoredFailure(reason=failure.reason, retry_after=failure.retry_after)
            return Outcome(status="error", failure=stored)
        return Outcome(
            status=self.status,
            message_id=self.message_id,
            citations=self.citations,
            handoff_context=None if self.handoff_context is None else self.handoff_context.model_dump(),
        )

    @classmethod
    def from_stored(cls, stored: Outcome, answer: str = "") -> GraphOutcome:
        """Return the outcome a stored `outcome` channel value (and the answer's text) describes."""
        status: OutcomeStatus = stored.get("status") or "error"
        if status == "error":
            failure = stored.get("failure")
            problem: dict[str, JsonValue] = (
                {} if failure is None else {"reason": failure["reason"], "retry_after": failure["retry_after"]}
            )
            return cls("error", failure=Failure.from_problem(problem))
        return cls(
            status,
            answer=answer,
            message_id=stored.get("message_id"),
            citations=list(stored.get("citations") or []),
            handoff_context=_handoff(stored.get("handoff_context")),
        )


def _handoff(stored: object) -> HandoffContext | None:
    """Return a stored hand-off (a dict in every checkpoint written so far) as its type."""
    return HandoffContext.model_validate(stored) if isinstance(stored, Mapping) else None


def outcome_of(update: Mapping[str, ConversationState]) -> GraphOutcome | None:
    """Return the outcome in one `updates` chunk of the graph's stream, if it holds the answer node's."""
    generated = update.get("generate")
    outcome = generated.get("outcome") if isinstance(generated, dict) else None
    if generated is None or not outcome:
        return None
    messages = generated.get("messages") or []
    return GraphOutcome.from_stored(outcome, str(messages[0].text) if messages else "")
