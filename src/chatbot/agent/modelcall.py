"""One call to a real chat model: structured answer, validated, with a safe fallback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field, ValidationError

log = logging.getLogger(__name__)


class ModelFailure(Exception):
    """The model call failed (provider error or unusable output after the fallback)."""


class ModelTimeout(ModelFailure):
    """The model did not answer within the configured timeout."""


class StructuredAnswer(BaseModel):
    """The shape the model must answer in."""

    status: Literal["answered", "clarifying", "escalate"] = Field(
        description="answered: the chunks answer the question; clarifying: you need more detail from the user; "
        "escalate: the user asks for a person or the matter needs a human"
    )
    answer: str = Field(description="The reply shown to the user, in the user's language")
    citations: list[str] = Field(default_factory=list, description="chunk_id of every chunk the answer uses")


@dataclass(frozen=True, slots=True)
class ModelReply:
    """A validated model answer."""

    status: Literal["answered", "clarifying", "escalate"]
    content: str
    citations: list[str]
    escalation_reason: str | None


_FALLBACK = {
    "fa": "متأسفانه الان نتوانستم پاسخ روشنی آماده کنم. لطفاً سؤالتان را با جزئیات بیشتری دوباره بنویسید.",
    "en": "Sorry, I couldn't put together a clear answer just now. "
    "Could you rephrase your question with a bit more detail?",
}


async def ask_model(
    model: BaseChatModel,
    window: Sequence[BaseMessage],
    *,
    known_chunk_ids: set[str],
    language: str,
    timeout: float,
) -> ModelReply:
    """Ask for a structured answer; unusable output becomes a clarifying question."""
    try:
        structured = model.with_structured_output(StructuredAnswer)
        async with asyncio.timeout(timeout):
            raw = await structured.ainvoke(list(window))
    except TimeoutError:
        raise ModelTimeout("model timed out") from None
    except (ValidationError, ValueError) as exc:  # output that does not fit the schema
        log.warning("model output rejected", extra={"error": type(exc).__name__})
        raw = None
    except Exception as exc:
        raise ModelFailure(type(exc).__name__) from None
    parsed = raw if isinstance(raw, StructuredAnswer) else _coerce(raw)
    if parsed is None or not parsed.answer.strip():
        return ModelReply("clarifying", _FALLBACK.get(language, _FALLBACK["en"]), [], None)
    # Cite only chunks this turn actually retrieved: a model can invent ids.
    citations = [c for c in dict.fromkeys(parsed.citations) if c in known_chunk_ids]
    reason = "model_escalated" if parsed.status == "escalate" else None
    return ModelReply(parsed.status, parsed.answer.strip(), citations, reason)


def _coerce(raw: object) -> StructuredAnswer | None:
    if isinstance(raw, dict):
        try:
            return StructuredAnswer.model_validate(raw)
        except ValidationError:
            return None
    return None
