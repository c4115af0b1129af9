"""Request and response bodies of the thread endpoints."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

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

ThreadId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]


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
