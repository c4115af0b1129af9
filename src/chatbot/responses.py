"""Response bodies of the API, as the contract defines them.

The typed client (`chatbot.client`) parses every answer into these models. They accept
fields they do not know (`extra="ignore"`, pydantic's default), so an older client keeps
working against a newer service that adds a field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, GetPydanticSchema, JsonValue, PlainSerializer, field_serializer
from pydantic_core import core_schema

from chatbot.ids import RunId, ThreadId, UserId
from chatbot.timestamps import rfc3339

JsonObject = Annotated[
    dict[str, JsonValue], GetPydanticSchema(lambda _, __: core_schema.dict_schema(core_schema.str_schema()))
]
"""A JSON object of no fixed shape (a profile). Read and documented as any object, as it always
was; the type says what the service puts in it."""

RunStatus = Literal["answered", "clarifying", "escalate"]


def _as_written(moment: datetime):  # type: ignore[no-untyped-def]  # unannotated: the schema stays date-time
    return rfc3339(moment)


StoredMoment = Annotated[datetime, PlainSerializer(_as_written, when_used="json")]
"""A moment the service wrote as RFC 3339 with milliseconds and a `Z` (timestamps.py): a message's
`created_at` is stored so, and goes out as it was stored."""


class ProblemDetails(BaseModel):
    """An RFC 9457 problem-details object (error bodies and the SSE `error` event)."""

    type: str = "about:blank"
    title: str = ""
    status: int
    detail: str = ""


class RunProblem(ProblemDetails):
    """The problem of a failed run (the SSE `error` event, the JSON answer of a failed run)."""

    reason: str | None = None
    """model_failed, model_incomplete, model_timeout, model_rate_limited, budget_exhausted, database, cancelled,
    interrupted or internal (chatbot/failures.py)."""
    retry_after: float | None = None
    """On `model_rate_limited`: the seconds the provider asked to wait; on `budget_exhausted`: the
    seconds until the budget's period resets, at most 300."""


class MessageRef(BaseModel):
    """A message by id and content (the answer of `end`, the input and answer of a run record)."""

    id: str
    content: str


class RoleMessage(BaseModel):
    """A message with its role, as a hand-off payload lists them."""

    role: str
    content: str


class HandoffContext(BaseModel):
    """What a human assistant needs to take the conversation over (`end` on `escalate`)."""

    reason: str
    conversation_summary: str
    user_profile: JsonObject = Field(default_factory=dict)
    recent_messages: list[RoleMessage] = Field(default_factory=list)


class RunEnd(BaseModel):
    """The `end` event of a run, also the JSON answer of `POST …/runs`."""

    run_id: RunId
    thread_id: ThreadId
    status: RunStatus
    message: MessageRef
    citations: list[str] = Field(default_factory=list)
    handoff_context: HandoffContext | None = None


class TranscriptMessage(BaseModel):
    """One user or assistant message of `GET …/messages`."""

    id: str
    role: Literal["user", "assistant"]
    content: str
    created_at: StoredMoment
    run_id: RunId | None = None
    citations: list[str] = Field(default_factory=list)


class MessagesPage(BaseModel):
    """One page of a thread's transcript, oldest first."""

    messages: list[TranscriptMessage]
    has_more: bool
    next_before: str | None = None


class ContextMessage(BaseModel):
    """A message of the window the model was given in a run."""

    id: str | None = None
    role: Literal["user", "assistant"]
    content: str


class QuotedChunk(BaseModel):
    """A knowledge chunk's text with its citation: the one shape every layer passes a chunk in.

    Search finds these, the graph keeps them for the window and the offline responder, a run
    record quotes its cited versions as these, and an evaluation case gives them back. It
    lives here, beside the API's `RetrievedChunk` (built from it), so every feature may import it.
    Not a response body: no endpoint returns it, so the OpenAPI document does not name it.
    """

    model_config = ConfigDict(frozen=True)

    chunk_id: str
    document_id: str = ""
    version: int = 1
    """(chunk_id, version) names the exact row a run record cites."""
    title: str = ""
    """The heading path, `Document › Heading` (empty when the chunk has none)."""
    text: str
    language: str = ""
    """"fa" or "en" (empty when unknown): the offline responder prefers chunks in the answer's language."""
    pages: list[int] | None = None
    """The 1-based PDF pages the text came from (None for a document without pages)."""
    score: float = 0.0
    """The search's fused relevance (0 when the chunk did not come from a search)."""


# The wire form of a `QuotedChunk`'s citation (`quoting`); its text may be null once pruned.
# The docstring is the schema's description: keep it as the OpenAPI document has it.
class RetrievedChunk(BaseModel):
    """A knowledge chunk as it read when the run retrieved it."""

    chunk_id: str
    document_id: str
    version: int
    text: str | None = Field(
        description="The chunk's text at that version; null only once the version was pruned, "
        "which happens when no retained run cites it any more."
    )
    pages: list[int] | None = Field(
        default=None,
        description="The 1-based PDF pages the chunk's text came from; null for formats without pages "
        "(Markdown, text, DOCX, HTML) and once the version was pruned.",
    )

    @classmethod
    def quoting(cls, chunk: QuotedChunk) -> RetrievedChunk:
        """Return the API's view of a chunk version that still reads."""
        return cls(
            chunk_id=chunk.chunk_id,
            document_id=chunk.document_id,
            version=chunk.version,
            text=chunk.text,
            pages=chunk.pages,
        )


class RunContext(BaseModel):
    """What the agent saw in a run."""

    system_prompt_sha256: str | None = None
    summary: str = ""
    profile: JsonObject = Field(default_factory=dict)
    facts: list[str] = Field(default_factory=list)
    messages: list[ContextMessage] = Field(default_factory=list)
    retrieved: list[RetrievedChunk] = Field(default_factory=list)
    recalled: list[ContextMessage] = Field(default_factory=list)
    """Earlier turns of the thread recall gave the model, in the order given (docs/api.md)."""


class RecordedAnswer(MessageRef):
    """A run's answer as the user got it; `complete` is false for the shown part of a failed run."""

    complete: bool = True


class ModelCallUsage(BaseModel):
    """One model call of a run, with the token counts its provider reported."""

    # The service's one type of a call's usage: the agent collects these (counts from a
    # provider through models/usage.py `usage_from_metadata`, clamped by
    # db/usage_totals.token_count), budgets settle them, the run record stores their
    # `model_dump()` and `GET …/runs/{run_id}` answers them. 0 where the provider reports none.

    model_config = ConfigDict(frozen=True)

    kind: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


class RunRecord(BaseModel):
    """`GET …/runs/{run_id}`: the run as recorded, for audits and disputed answers."""

    run_id: RunId
    thread_id: ThreadId
    status: str
    created_at: StoredMoment
    model: str | None = None
    input: MessageRef
    answer: RecordedAnswer | None = None
    citations: list[str] = Field(default_factory=list)
    usage: list[ModelCallUsage] = Field(default_factory=list)
    context: RunContext = Field(default_factory=RunContext)


# Stored in this shape too, inside the fact (memory/facts.py reads and writes it there).
class FactSource(BaseModel):
    """The turn that last wrote a fact: its thread and run."""

    thread_id: ThreadId
    run_id: RunId


class MemoryFact(BaseModel):
    """One remembered fact about the user."""

    id: str
    text: str
    category: str
    updated_at: datetime
    source: FactSource | None = Field(
        default=None,
        description="The run whose turn last wrote the fact; null for facts stored before sources were kept.",
    )


class FactVersion(BaseModel):
    """A fact with when it was believed: current (`valid_until` null) or closed by a later fact of the same kind."""

    id: str
    text: str
    category: str
    valid_from: datetime
    valid_until: datetime | None = None
    source: FactSource | None = Field(default=None, description="The run whose turn wrote this version.")
    closed_by: FactSource | None = Field(
        default=None, description="The run whose turn replaced this version; null while it is current."
    )

    @field_serializer("valid_from", "valid_until", when_used="json-unless-none")
    def _stored_form(self, moment: datetime):  # type: ignore[no-untyped-def]  # unannotated: the schema stays date-time
        """Write the moments as the memory store keeps them: UTC, always with microseconds."""
        return rfc3339(moment, timespec="microseconds")


class UserMemory(BaseModel):
    """`GET /v1/users/{user_id}/memory`: what the store holds about the user."""

    user_id: UserId
    profile: JsonObject = Field(default_factory=dict)
    facts: list[MemoryFact] = Field(default_factory=list)
    history: list[FactVersion] | None = Field(
        default=None,
        description="With `?history=true` only: every fact with when it was believed, oldest first. "
        "The model sees current facts only.",
    )


class ErasureReport(BaseModel):
    """`DELETE /v1/users/{user_id}`: what the erasure removed."""

    threads_deleted: int
    memory_items_deleted: int
    feedback_deleted: int
