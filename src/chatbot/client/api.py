"""What both clients share: the paths of the API, request bodies, and when to retry."""

from __future__ import annotations

import random
from dataclasses import dataclass
from urllib.parse import quote

from pydantic import JsonValue

from chatbot.client.errors import InvalidId

SSE = "text/event-stream"
JSON = "application/json"
RETRIED_STATUSES = frozenset({429, 503})  # 409 never: a second run on a busy thread must not queue up


_DOT_SEGMENTS = frozenset({"", ".", ".."})


def _segment(value: str) -> str:
    """Return `value` as one path segment: every reserved character escaped, never a segment of its own.

    `quote` leaves `.` as it is (it is unreserved), so "." and ".." would stay dot segments
    that the URL resolution of httpx (and of every proxy) removes, and the request would go
    to the parent resource: those, and "", are refused rather than sent.
    """
    if value in _DOT_SEGMENTS:
        raise InvalidId(f"{value!r} is not an id")
    return quote(value, safe="")


def runs_path(thread_id: str) -> str:
    """Return the path that starts runs on a thread."""
    return f"/v1/threads/{_segment(thread_id)}/runs"


def run_path(thread_id: str, run_id: str) -> str:
    """Return the path of one run's record."""
    return f"{runs_path(thread_id)}/{_segment(run_id)}"


def stream_path(thread_id: str, run_id: str) -> str:
    """Return the path that rejoins a run's stream."""
    return f"{run_path(thread_id, run_id)}/stream"


def feedback_path(thread_id: str, run_id: str) -> str:
    """Return the path of a run's feedback."""
    return f"{run_path(thread_id, run_id)}/feedback"


def cancel_path(thread_id: str, run_id: str) -> str:
    """Return the path that stops a run in flight."""
    return f"{run_path(thread_id, run_id)}/cancel"


def messages_path(thread_id: str) -> str:
    """Return the path of a thread's transcript."""
    return f"/v1/threads/{_segment(thread_id)}/messages"


def thread_path(thread_id: str) -> str:
    """Return the path of a thread."""
    return f"/v1/threads/{_segment(thread_id)}"


def user_path(user_id: str) -> str:
    """Return the path of a user (erasure)."""
    return f"/v1/users/{_segment(user_id)}"


def memory_path(user_id: str) -> str:
    """Return the path of a user's memory."""
    return f"{user_path(user_id)}/memory"


def fact_path(user_id: str, fact_id: str) -> str:
    """Return the path of one remembered fact."""
    return f"{memory_path(user_id)}/facts/{_segment(fact_id)}"


def run_body(content: str) -> dict[str, JsonValue]:
    """Return the body of `POST …/runs`."""
    return {"message": {"content": content}}


def messages_params(limit: int, before: str | None) -> dict[str, str | int]:
    """Return the query of `GET …/messages`."""
    return {"limit": limit} | ({"before": before} if before is not None else {})


def feedback_body(score: str, comment: str | None) -> dict[str, JsonValue]:
    """Return the body of `POST …/feedback`."""
    return {"score": score, "comment": comment}


@dataclass(frozen=True, slots=True)
class Retries:
    """When to retry a request the service turned away with `429` or `503`.

    `Retry-After` is honoured exactly; without one, the wait doubles from `backoff` up to
    `max_backoff`, with jitter so that many clients do not come back at the same instant.
    A `Retry-After` longer than `max_wait` is not waited for: the error is raised at once.
    """

    attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_wait: float = 60.0

    def delay(self, attempt: int, status: int, retry_after: float | None) -> float | None:
        """Return how long to wait before retry number `attempt + 1`, or None to give up."""
        if status not in RETRIED_STATUSES or attempt >= self.attempts:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_wait else None
        ceiling = min(self.max_backoff, self.backoff * 2**attempt)
        return ceiling * (0.5 + random.random() / 2)  # jitter, not a secret


NO_RETRIES = Retries(attempts=0)
