"""One answer from the model chain: structured, complete or named as failed, with its usage.

The chain is tried in order while nothing has been shown: a model that fails before its
first answer token (connection error, 5xx, 429 after the client's retries, first-token
timeout, a stream cut before any answer) hands the same window to the next entry. After
the first token there is no switch: the user has seen the answer begin.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field, ValidationError

from chatbot import metrics
from chatbot.agent._prompts import system_prompt
from chatbot.agent._tokens import token_counter_for
from chatbot.budgets.service import AnswerSizer, BudgetExhausted
from chatbot.config import Settings
from chatbot.failures import FailureReason, bounded_retry_after
from chatbot.models.answer_field import valid_unicode
from chatbot.models.chain import ChainEntry
from chatbot.models.reply import Reply
from chatbot.models.structured import Limits, Streamed, StreamTimeout, stream_structured
from chatbot.models.usage import usage_from_metadata
from chatbot.responses import ModelCallUsage, RunStatus

log = logging.getLogger(__name__)


class ModelFailure(Exception):
    """The chain could not give a complete answer: the reason, and what the user saw meanwhile.

    The provider's exception is kept as `__cause__` (so logged tracebacks show where it
    came from), and its class name and HTTP status are copied onto `error_class` and
    `status`: a revoked key (401), a provider rate limit (429) and a provider outage (5xx)
    must be told apart in logs and metrics without reading the exception's message, which
    can quote the provider's response or the user's text.
    """

    error_class: str
    """Class name of the provider's exception, e.g. `RateLimitError`."""
    status: int | None
    """HTTP status the provider answered with (an error inside a 200 stream: the status its type means)."""

    def __init__(
        self,
        error_class: str,
        status: int | None = None,
        *,
        reason: FailureReason = "model_failed",
        retry_after: float | None = None,
        shown: str = "",
        model: str | None = None,
        usage: Sequence[ModelCallUsage] = (),
    ) -> None:
        # The message repeats only these two fields: never the provider's own message.
        super().__init__(error_class if status is None else f"{error_class} (HTTP {status})")
        self.error_class = error_class
        self.status = status
        self.reason: FailureReason = reason
        self.retry_after = retry_after
        self.shown = shown
        """The answer text the user was shown before the failure (kept in the record only)."""
        self.model = model
        self.usage = list(usage)

    def __reduce__(self) -> tuple[type[ModelFailure], tuple[str, int | None]]:
        # Exceptions pickle as `cls(*self.args)`, and `args` holds the formatted message.
        return type(self), (self.error_class, self.status)


class ModelTimeout(ModelFailure):
    """A time limit of the model call passed (first token, idle gap, or the whole answer)."""


class StructuredAnswer(BaseModel):
    """The shape the model must answer in."""

    status: RunStatus = Field(
        description="answered: the chunks answer the question; clarifying: you need more detail from the user; "
        "escalate: the user asks for a person or the matter needs a human"
    )
    answer: str = Field(description="The reply shown to the user, in the user's language")
    citations: list[str] = Field(default_factory=list, description="chunk_id of every chunk the answer uses")


# As JSON schema: the request carries it as is, and the answer is read as JSON text.
_ANSWER_SCHEMA = StructuredAnswer.model_json_schema()
# Input an answer call sends beside its window's messages and its schema, which neither
# counts: the structured-output tool or response format wrapped around the schema (the
# messages' own framing is counted with them, agent/_tokens.py). A budget sizes each call
# on the window plus these: generous, so the count stays above what the provider bills.
_REQUEST_OVERHEAD_TOKENS = 64


def answer_input_bound(model: str, context_tokens: int) -> int:
    """Return the most input tokens an answer call may send: a full window plus its schema.

    A budget's early hold of a run takes this before the replica has counted any window:
    the window never passes `context_tokens` (agent/_window.py).
    """
    return context_tokens + _schema_tokens(model) + _REQUEST_OVERHEAD_TOKENS


def answer_input_tokens(model: str, window: Sequence[BaseMessage]) -> int:
    """Return the input an answer call sends: the window as counted, its schema and framing."""
    return token_counter_for(model).count_messages(window) + _schema_tokens(model) + _REQUEST_OVERHEAD_TOKENS


def answer_input_floor(model: str, question: str, language: str, context_tokens: int) -> int:
    """Return the least input an answer call sends: the system prompt and the question, schema and framing.

    A budget's early hold of a run takes at least this, before its window is built.
    """
    counter = token_counter_for(model)
    window = counter.count_text(system_prompt(language)) + counter.count_text(question)
    return min(window, context_tokens) + _schema_tokens(model) + _REQUEST_OVERHEAD_TOKENS


def _schema_tokens(model: str) -> int:
    return token_counter_for(model).count_text(json.dumps(_ANSWER_SCHEMA, ensure_ascii=False))


_FALLBACK = {
    "fa": "متأسفانه الان نتوانستم پاسخ روشنی آماده کنم. لطفاً سؤالتان را با جزئیات بیشتری دوباره بنویسید.",
    "en": "Sorry, I couldn't put together a clear answer just now. "
    "Could you rephrase your question with a bit more detail?",
}
# What the user reads when the model declines: a person takes over (escalate, model_refused).
_REFUSED = {
    "fa": "این موضوع را به یکی از همکارانم می‌سپارم تا بررسی کند.",
    "en": "I'll pass this to a colleague who can help you with it.",
}


@dataclass(frozen=True, slots=True)
class TimeLimits:
    """The contract's three bounds of an answer, in seconds."""

    first_token: float
    idle: float
    total: float

    @classmethod
    def of(cls, settings: Settings) -> TimeLimits:
        """Return the bounds the settings give (`CHATBOT_MODEL_*_TIMEOUT_SECONDS`)."""
        return cls(
            first_token=settings.model_first_token_timeout_seconds,
            idle=settings.model_idle_timeout_seconds,
            total=settings.model_timeout_seconds,
        )


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """A complete answer: the reply, the chain entry that gave it, every call's usage."""

    reply: Reply
    model: str
    usage: list[ModelCallUsage] = field(default_factory=list)


async def ask_model(
    chain: Sequence[ChainEntry],
    window: Sequence[BaseMessage],
    *,
    known_chunk_ids: set[str],
    language: str,
    limits: TimeLimits,
    on_delta: Callable[[str], None],
    on_cancelled: Callable[[ModelCallUsage], None] | None = None,
    size: AnswerSizer | None = None,
) -> ModelAnswer:
    """Ask the chain for a structured answer, streaming its `answer` field as it arrives.

    With `size` (budgets), each entry's call is first sized against the caller's budgets: it
    is sent with the output that fits as its `max_tokens`, and a call that does not fit
    raises ModelFailure(`budget_exhausted`) instead of being sent. Whatever was streamed is
    what the answer's content becomes, so the deltas always add up to it. A stream that stops
    short raises ModelFailure(`model_incomplete`) with the shown text; a refusal is an
    escalation; output that does not fit the schema becomes a clarifying question (counted
    and logged, never silent).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.total
    usage: list[ModelCallUsage] = []
    for index, entry in enumerate(chain):
        state = Streamed()
        can_fall_back = index + 1 < len(chain)
        bounds = Limits(first_token=limits.first_token, idle=limits.idle, deadline=deadline)
        max_tokens = await _sized(size, entry.spec, window, usage)
        started = time.perf_counter()
        try:
            await stream_structured(
                entry, window, _ANSWER_SCHEMA, limits=bounds, on_delta=on_delta, into=state, max_tokens=max_tokens
            )
        except asyncio.CancelledError:
            # Stopped (a user's cancel): the calls so far still cost the tenant, and the run's
            # record keeps them (docs/records.md), so they go to `on_cancelled` on the way out.
            if on_cancelled is not None:
                for call in (*usage, _cut_usage(entry.spec, window, state)):
                    on_cancelled(call)
            raise
        except StreamTimeout as exc:
            usage.append(usage_from_metadata("answer", entry.spec, state.usage))
            _count(entry.spec, "timeout", started)
            metrics.MODEL_ERRORS.labels(error_class="TimeoutError", status="none").inc()
            if can_fall_back and not state.answer and exc.phase == "first_token":
                _fall_back(entry, "first_token_timeout")
                continue
            raise ModelTimeout(
                "TimeoutError", reason="model_timeout", shown=state.answer, model=entry.spec, usage=usage
            ) from exc
        except Exception as exc:  # the provider's error; CancelledError is not one and propagates
            usage.append(usage_from_metadata("answer", entry.spec, state.usage))
            status = provider_status(exc)
            reason: FailureReason = (
                "model_rate_limited" if status == 429 else "model_incomplete" if state.answer else "model_failed"
            )
            _count(entry.spec, "rate_limited" if status == 429 else "failed", started)
            metrics.MODEL_ERRORS.labels(error_class=type(exc).__name__, status=_label(status)).inc()
            if can_fall_back and not state.answer:
                _fall_back(entry, "rate_limited" if status == 429 else "error")
                continue
            raise ModelFailure(
                type(exc).__name__,
                status,
                reason=reason,
                retry_after=retry_after(exc) if status == 429 else None,
                shown=state.answer,
                model=entry.spec,
                usage=usage,
            ) from exc
        usage.append(usage_from_metadata("answer", entry.spec, state.usage))
        stop = state.stop(reports_finish=entry.reports_finish)
        if stop == "incomplete":
            _count(entry.spec, "incomplete", started)
            log.warning("model stopped short", extra={"model": entry.spec, "finish": state.finish})
            if can_fall_back and not state.answer:
                _fall_back(entry, "incomplete")
                continue
            raise ModelFailure(
                "IncompleteAnswer", reason="model_incomplete", shown=state.answer, model=entry.spec, usage=usage
            )
        if stop == "refused" or (state.text_only and not state.field.text):
            _count(entry.spec, "refused", started)
            log.warning("model refused", extra={"model": entry.spec, "finish": state.finish})
            return ModelAnswer(_refusal(state.answer, language, on_delta), entry.spec, usage)
        reply = _reply(state, known_chunk_ids, language, on_delta, entry.spec, started)
        return ModelAnswer(reply, entry.spec, usage)
    raise ModelFailure("EmptyChain", reason="model_failed", usage=usage)


async def _sized(
    size: AnswerSizer | None, spec: str, window: Sequence[BaseMessage], usage: Sequence[ModelCallUsage]
) -> int | None:
    """Return the output the budgets let this call produce (None: unchecked); refused: ModelFailure."""
    if size is None:
        return None
    try:
        return await size(spec, answer_input_tokens(spec, window), usage)
    except BudgetExhausted as exc:
        raise ModelFailure(
            type(exc).__name__, reason="budget_exhausted", retry_after=exc.retry_after, model=spec, usage=usage
        ) from None


def _cut_usage(spec: str, window: Sequence[BaseMessage], state: Streamed) -> ModelCallUsage:
    """Return the usage of a call stopped mid-stream: the provider's counts when it sent them.

    A provider reports a streamed call's counts only at its end, which a cut call never
    reaches; then the prompt and the text streamed so far are counted as the service counts
    its window (agent/_tokens.py), an estimate rather than nothing.
    """
    if state.usage is not None:
        return usage_from_metadata("answer", spec, state.usage)
    counter = token_counter_for(spec)
    return ModelCallUsage(
        kind="answer",
        model=spec,
        input_tokens=counter.count_messages(window),
        output_tokens=counter.count_text(state.answer),
    )


def _reply(
    state: Streamed,
    known_chunk_ids: set[str],
    language: str,
    on_delta: Callable[[str], None],
    model: str,
    started: float,
) -> Reply:
    """Return the reply of a stream that finished normally (unusable output: a clarifying question)."""
    parsed = _coerce(state.parsed())
    streamed = state.answer
    if parsed is None or not (streamed or parsed.answer).strip():
        _count(model, "unusable", started)
        log.warning("model output unusable", extra={"model": model, "finish": state.finish})
        if streamed:  # the user has seen it: keep the record faithful, ask for more detail
            return Reply("clarifying", streamed, [], None)
        fallback = _FALLBACK.get(language, _FALLBACK["en"])
        on_delta(fallback)
        return Reply("clarifying", fallback, [], None)
    _count(model, "ok", started)
    final = valid_unicode(parsed.answer)
    if final.startswith(streamed) and len(final) > len(streamed):
        on_delta(final[len(streamed) :])
        streamed = final
    # Cite only chunks this turn actually retrieved: a model can invent ids.
    citations = [c for c in dict.fromkeys(parsed.citations) if c in known_chunk_ids]
    reason = "model_escalated" if parsed.status == "escalate" else None
    return Reply(parsed.status, streamed, citations, reason)


def _refusal(shown: str, language: str, on_delta: Callable[[str], None]) -> Reply:
    handoff = _REFUSED.get(language, _REFUSED["en"])
    text = f"\n\n{handoff}" if shown else handoff
    on_delta(text)
    return Reply("escalate", shown + text, [], "model_refused")


def _fall_back(entry: ChainEntry, reason: str) -> None:
    metrics.MODEL_FALLBACKS.labels(reason=reason).inc()
    log.warning(
        "model failed before answering; trying the next in the chain", extra={"model": entry.spec, "reason": reason}
    )


def _count(model: str, outcome: str, started: float) -> None:
    metrics.MODEL_CALLS.labels(model=model, kind="answer", outcome=outcome).inc()
    metrics.MODEL_CALL_SECONDS.labels(kind="answer").observe(time.perf_counter() - started)


def _label(status: int | None) -> str:
    return "none" if status is None else str(status)


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def http_status(exc: BaseException) -> int | None:
    """Return the HTTP status a provider exception carries, looking through its causes.

    The provider SDKs put it on the exception (`status_code`: openai, anthropic, ollama)
    or on its response (`response.status_code`: httpx); LangChain may wrap either.
    """
    for current in _causes(exc):
        for holder in (current, getattr(current, "response", None)):
            status = getattr(holder, "status_code", None)
            if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
                return status
    return None


# An error event inside a 200 stream (Anthropic's `event: error`, an OpenAI-compatible
# server's error chunk) carries the stream's 200; its type says what the status would be.
_ERROR_TYPE_STATUS = {
    "overloaded_error": 529,
    "api_error": 500,
    "server_error": 500,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "timeout_error": 504,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "invalid_request_error": 400,
}


def provider_status(exc: BaseException) -> int | None:
    """Return the provider's HTTP status for a failure; an in-stream error reads by its type."""
    status = http_status(exc)
    if status is not None and status >= 400:
        return status
    for current in _causes(exc):
        body = getattr(current, "body", None)
        error = body.get("error", body) if isinstance(body, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        if isinstance(kind, str) and kind in _ERROR_TYPE_STATUS:
            return _ERROR_TYPE_STATUS[kind]
    return status


def retry_after(exc: BaseException) -> float | None:
    """Return the seconds the provider asked to wait (`retry-after-ms` or `Retry-After`), if it did.

    Bounded to [0, RETRY_AFTER_MAX_SECONDS] (failures.py) where it enters.
    """
    return bounded_retry_after(_provider_wait(exc))


def _provider_wait(exc: BaseException) -> float | None:
    for current in _causes(exc):
        headers = getattr(getattr(current, "response", None), "headers", None)
        if headers is None:
            continue
        millis = headers.get("retry-after-ms")
        try:
            if millis is not None:
                return max(0.0, float(millis) / 1000)
            value = headers.get("retry-after")
            if value is None:
                continue
            return max(0.0, float(value))
        except ValueError:
            try:  # Retry-After may also be an HTTP date
                when = email.utils.parsedate_to_datetime(str(value))
            except (TypeError, ValueError):
                continue
            return max(0.0, when.timestamp() - time.time())
    return None


def _coerce(raw: object) -> StructuredAnswer | None:
    if isinstance(raw, dict):
        try:
            return StructuredAnswer.model_validate(raw)
        except ValidationError:
            return None
    return None
