"""Request bodies and path types of the thread endpoints (`ThreadId`, `RunId`).

Their response bodies are in `chatbot/responses.py`: the typed client (`chatbot.client`), a
feature that may import no other, parses answers into the same models.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from chatbot import ids
from chatbot.errors import Problem

MAX_CONTENT_CHARS = 8000

# U+0000 cannot be stored in a Postgres text or jsonb value, and an unpaired surrogate
# cannot be encoded as UTF-8 (it would be stored as "?"): both are refused, never altered.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def refuse_unstorable(value: str) -> str:
    """Refuse text holding U+0000 or an unpaired surrogate; return it unchanged otherwise."""
    if _UNSTORABLE.search(value):
        raise ValueError("must not contain U+0000 or unpaired surrogates")
    return value


# Every free-text field of a request body: stored as sent, or refused.
StorableText = Annotated[str, AfterValidator(refuse_unstorable)]

ThreadId = Annotated[ids.ThreadId, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]

_RUN_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
NOT_A_RUN = ids.RunId("")
"""What a `RunId` parameter holds for text that cannot be a run id (handlers answer 404)."""


def canonical_run_id(value: str) -> ids.RunId:
    """Return a run id as the service spells it (lower case), or `NOT_A_RUN` when `value` cannot be one.

    Run ids are UUIDs the service generated and gave out in their 36-character form; any
    other text, however long or however close ("-" * 32 + hex, braces, a suffix), names no
    run of any thread. It is a 404 like a run of another thread, never a 422: one answer on
    every endpoint that takes a run id.
    """
    return ids.RunId(value.lower()) if _RUN_ID.fullmatch(value) else NOT_A_RUN


# The `run_id` path parameter of every run endpoint (record, stream, feedback, cancel). Its
# validation never fails, so a malformed run id cannot answer before the thread checks do;
# the handler refuses `NOT_A_RUN` with `run_not_found()` after them.
RunId = Annotated[
    ids.RunId,
    Path(description="The run's id as the service gave it (a UUID, any case); any other text names no run (404)."),
    AfterValidator(canonical_run_id),
]


def run_not_found() -> Problem:
    """Return the 404 for a run id that is not a run of this thread (or cannot be a run id)."""
    return Problem(404, "run not found on this thread")


class MessageIn(BaseModel):
    """The user's message."""

    model_config = ConfigDict(extra="forbid")
    content: StorableText

    @field_validator("content")
    @classmethod
    def _length_after_strip(cls, value: str) -> str:
        stripped = len(value.strip())
        if stripped == 0:
            raise ValueError("must not be empty")
        if stripped > MAX_CONTENT_CHARS:
            raise ValueError(f"must be at most {MAX_CONTENT_CHARS} characters")
        return value  # kept as sent: the transcript is a record


class RunRequest(BaseModel):
    """Body of `POST /v1/threads/{thread_id}/runs`."""

    model_config = ConfigDict(extra="forbid")
    message: MessageIn


class FeedbackRequest(BaseModel):
    """Body of `POST /v1/threads/{thread_id}/runs/{run_id}/feedback`."""

    model_config = ConfigDict(extra="forbid")
    score: Literal["up", "down"]
    comment: StorableText | None = Field(default=None, max_length=2000)
