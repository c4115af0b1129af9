"""One call to a real chat model: structured answer, validated, with a safe fallback."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field, ValidationError

from chatbot import metrics
from chatbot.models.reply import Reply
from chatbot.responses import RunStatus

log = logging.getLogger(__name__)


class ModelFailure(Exception):
    """The model call failed (provider error or unusable output after the fallback).

    The provider's exception is kept as `__cause__` (so logged tracebacks show where it
    came from), and its class name and HTTP status are copied onto `error_class` and
    `status`: a revoked key (401), a provider rate limit (429) and a provider outage (5xx)
    must be told apart in logs and metrics without reading the exception's message, which
    can quote the provider's response or the user's text.
    """

    error_class: str
    """Class name of the provider's exception, e.g. `RateLimitError`."""
    status: int | None
    """HTTP status the provider answered with, when its exception carries one."""

    def __init__(self, error_class: str, status: int | None = None) -> None:
        # The message repeats only these two fields: never the provider's own message.
        super().__init__(error_class if status is None else f"{error_class} (HTTP {status})")
        self.error_class = error_class
        self.status = status

    def __reduce__(self) -> tuple[type[ModelFailure], tuple[str, int | None]]:
        # Exceptions pickle as `cls(*self.args)`, and `args` holds the formatted message.
        return type(self), (self.error_class, self.status)


class ModelTimeout(ModelFailure):
    """The model did not answer within the configured timeout."""


class StructuredAnswer(BaseModel):
    """The shape the model must answer in."""

    status: RunStatus = Field(
        description="answered: the chunks answer the question; clarifying: you need more detail from the user; "
        "escalate: the user asks for a person or the matter needs a human"
    )
    answer: str = Field(description="The reply shown to the user, in the user's language")
    citations: list[str] = Field(default_factory=list, description="chunk_id of every chunk the answer uses")


# As JSON schema (not the pydantic class) so that streaming yields partial dicts.
_ANSWER_SCHEMA = StructuredAnswer.model_json_schema()


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
    on_delta: Callable[[str], None],
) -> Reply:
    """Ask for a structured answer, streaming its `answer` field as it arrives.

    The schema is passed as JSON schema so the parser yields partial dicts while the
    model streams its tool-call arguments: the answer reaches the user token by token,
    and status and citations are validated once the object is complete. Whatever was
    streamed is what the answer's content becomes, so the deltas always add up to it.
    Unusable output becomes a clarifying question.
    """
    streamed = ""
    last: object = None
    try:
        structured = model.with_structured_output(_ANSWER_SCHEMA)
        async with asyncio.timeout(timeout):
            if not _streams(model):  # one complete object; nothing partial to forward
                last = await structured.ainvoke(list(window))
            else:
                async for partial in structured.astream(list(window)):
                    last = partial
                    answer = partial.get("answer") if isinstance(partial, dict) else None
                    answer = encodable(answer, partial=True) if isinstance(answer, str) else None
                    if answer is not None and len(answer) > len(streamed) and answer.startswith(streamed):
                        on_delta(answer[len(streamed) :])
                        streamed = answer
    except TimeoutError as exc:
        _count_failure("TimeoutError", None)
        raise ModelTimeout("TimeoutError") from exc
    except (ValidationError, ValueError) as exc:  # output that does not fit the schema
        log.warning("model output rejected", extra={"error": type(exc).__name__})
        last = None
    except Exception as exc:
        status = http_status(exc)
        _count_failure(type(exc).__name__, status)
        raise ModelFailure(type(exc).__name__, status) from exc
    parsed = _coerce(last)
    if parsed is None or not (streamed or parsed.answer).strip():
        if streamed:  # the user has seen it: keep the record faithful, ask for more detail
            return Reply("clarifying", streamed, [], None)
        fallback = _FALLBACK.get(language, _FALLBACK["en"])
        on_delta(fallback)
        return Reply("clarifying", fallback, [], None)
    final = encodable(parsed.answer, partial=False)
    if final.startswith(streamed) and len(final) > len(streamed):
        on_delta(final[len(streamed) :])
        streamed = final
    # Cite only chunks this turn actually retrieved: a model can invent ids.
    citations = [c for c in dict.fromkeys(parsed.citations) if c in known_chunk_ids]
    reason = "model_escalated" if parsed.status == "escalate" else None
    return Reply(parsed.status, streamed, citations, reason)


# A surrogate not paired with its other half: JSON's "\ud800" escapes decode to these, and
# no UTF-8 encoder accepts them (the SSE frame, the JSON response and the stored record all fail).
_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE_SURROGATE = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")


def encodable(text: str, *, partial: bool) -> str:
    """Return model text as valid Unicode: lone surrogates become U+FFFD, escaped pairs one character.

    A partial answer's trailing high surrogate is held back: the next piece may bring its
    pair, and a character once streamed cannot be taken back.
    """
    if partial and text and "\ud800" <= text[-1] <= "\udbff":
        text = text[:-1]
    if not _SURROGATE.search(text):
        return text
    paired = _LONE_SURROGATE.sub("\ufffd", text)
    return paired.encode("utf-16", "surrogatepass").decode("utf-16")


def http_status(exc: BaseException) -> int | None:
    """Return the HTTP status a provider exception carries, looking through its causes.

    The provider SDKs put it on the exception (`status_code`: openai, anthropic, ollama)
    or on its response (`response.status_code`: httpx); LangChain may wrap either.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for holder in (current, getattr(current, "response", None)):
            status = getattr(holder, "status_code", None)
            if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
                return status
        current = current.__cause__ or current.__context__
    return None


def _count_failure(error_class: str, status: int | None) -> None:
    metrics.MODEL_ERRORS.labels(error_class=error_class, status="none" if status is None else str(status)).inc()


def _streams(model: BaseChatModel) -> bool:
    """Tell whether the model implements streaming (else astream yields no partial objects)."""
    return type(model)._astream is not BaseChatModel._astream or type(model)._stream is not BaseChatModel._stream


def _coerce(raw: object) -> StructuredAnswer | None:
    if isinstance(raw, StructuredAnswer):
        return raw
    if isinstance(raw, dict):
        try:
            return StructuredAnswer.model_validate(raw)
        except ValidationError:
            return None
    return None
