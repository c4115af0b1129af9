"""One turn's reply, whoever wrote it: the offline responder or a chat model.

The graph (agent) turns a `Reply` into the answer message and the run's outcome; both
responders produce one, so neither needs to know the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chatbot.responses import RunStatus


@dataclass(frozen=True, slots=True)
class Reply:
    """What the responder decided for one turn."""

    status: RunStatus
    content: str
    citations: list[str] = field(default_factory=list)
    escalation_reason: str | None = None
