"""Errors the client raises: problem responses, typed by status, and streams that broke for good."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from typing import Any

import httpx
from pydantic import JsonValue, ValidationError

from chatbot.responses import ProblemDetails, RunProblem


class ChatbotError(Exception):
    """A problem-details answer of the service (`.status`, `.problem`)."""

    def __init__(self, status: int, problem: ProblemDetails) -> None:
        super().__init__(f"{status} {problem.title}: {problem.detail}".strip())
        self.status = status
        self.problem = problem


class ConflictError(ChatbotError):
    """409: a run is in flight on the thread (or the user's data is busy). Never retried."""


class RateLimitedError(ChatbotError):
    """429: the user's rate limit is exhausted; `.retry_after` is the wait the service asked for."""

    def __init__(self, status: int, problem: ProblemDetails, retry_after: float | None) -> None:
        super().__init__(status, problem)
        self.retry_after = retry_after


class InvalidId(ValueError):
    """An id the client will not put in a path: empty, `.` or `..` (a dot segment would make the
    request name another resource: `forget_fact("..")` would be `DELETE …/memory`, the whole memory)."""


class StreamInterrupted(ConnectionError):
    """A run's stream broke before its `end` and could not be rejoined; `join` it later."""

    def __init__(self, thread_id: str, run_id: str | None, last_event_id: str | None) -> None:
        super().__init__(f"the stream of run {run_id} on thread {thread_id} broke before its end")
        self.thread_id = thread_id
        self.run_id = run_id
        self.last_event_id = last_event_id


def retry_after_seconds(value: str | None) -> float | None:
    """Return the wait a `Retry-After` header asks for (seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # "²" passes isdigit() alone, and float() refuses it
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _problem(status: int, body: bytes) -> ProblemDetails:
    try:
        parsed: Any = json.loads(body) if body else None
        if isinstance(parsed, dict):
            # A run's problem carries its reason (and retry_after); others validate the same.
            return RunProblem.model_validate({"status": status, **parsed})
    except (ValueError, ValidationError):
        pass
    # Not a problem document (a proxy's error page, say): keep only the status's reason.
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    return ProblemDetails(status=status, title=phrase, detail=phrase)


def error_for(status: int, problem: ProblemDetails, retry_after: float | None = None) -> ChatbotError:
    """Return the typed error for a problem with this status."""
    if status == 409:
        return ConflictError(status, problem)
    if status == 429:
        return RateLimitedError(status, problem, retry_after)
    return ChatbotError(status, problem)


def error_from_response(response: httpx.Response) -> ChatbotError:
    """Return the typed error of a non-2xx response (its body must have been read)."""
    retry_after = retry_after_seconds(response.headers.get("retry-after"))
    return error_for(response.status_code, _problem(response.status_code, response.content), retry_after)


def error_from_event(data: dict[str, JsonValue]) -> ChatbotError:
    """Return the typed error of an SSE `error` event (a problem-details object)."""
    raw = data.get("status")
    status = raw if isinstance(raw, int) else 500
    return error_for(status, _problem(status, json.dumps(data).encode()))
