"""Why a run failed: the one table of failure reasons, their HTTP status and their wording.

Every place that turns a failed run into a problem (the live stream, a rejoin, a replay
from the record, the JSON answer) asks this table, so a reason reads the same everywhere
(docs/api.md, the `error` event's `reason`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from chatbot.errors import DATABASE_UNAVAILABLE, problem_body

FailureReason = Literal[
    "model_failed",
    "model_incomplete",
    "model_timeout",
    "model_rate_limited",
    "budget_exhausted",
    "database",
    "cancelled",
    "interrupted",
    "internal",
]

_TABLE: dict[FailureReason, tuple[int, str]] = {
    "model_failed": (502, "the model failed to answer"),
    "model_incomplete": (502, "the model stopped before finishing its answer; send the message again"),
    "model_timeout": (504, "the model did not answer in time"),
    "model_rate_limited": (503, "the model provider is rate limiting this service; retry later"),
    # A run admitted at its start whose window, once counted, no longer fits a budget.
    "budget_exhausted": (429, "a budget for model spending does not fit this answer; retry after its period resets"),
    "database": (503, DATABASE_UNAVAILABLE),
    "cancelled": (409, "the run was cancelled"),
    # A replica stopped (or lost its thread lock) before the run's end was written.
    "interrupted": (503, "the run was interrupted before it finished; send the message again"),
    "internal": (500, "the run failed"),
}


RETRY_AFTER_MAX_SECONDS = 300.0
"""The longest wait passed on from a provider's `Retry-After` (docs/api.md): a provider that asks
for 999999 s, or an HTTP date a year away, would otherwise park every caller's retries for days."""


def bounded_retry_after(seconds: float | None) -> float | None:
    """Return a provider's wait bounded to [0, RETRY_AFTER_MAX_SECONDS]; None for none or not a number."""
    if seconds is None or not math.isfinite(seconds):
        return None if seconds is None or math.isnan(seconds) else RETRY_AFTER_MAX_SECONDS
    return min(max(0.0, seconds), RETRY_AFTER_MAX_SECONDS)


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed run's reason, with the provider's `Retry-After` when it gave one (bounded)."""

    reason: FailureReason
    retry_after: float | None = None

    def __post_init__(self) -> None:
        # Bounded where it is kept: the live stream, the JSON answer and a replay all read it here.
        object.__setattr__(self, "retry_after", bounded_retry_after(self.retry_after))

    @property
    def status(self) -> int:
        """Return the HTTP status of this reason."""
        return _TABLE[self.reason][0]

    def problem(self) -> dict[str, JsonValue]:
        """Return the problem-details object of the `error` event (and of the JSON answer)."""
        status, detail = _TABLE[self.reason]
        body = problem_body(status, detail) | {"reason": self.reason}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        return body

    def headers(self) -> dict[str, str]:
        """Return the response headers of the JSON answer: `Retry-After` in whole seconds."""
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}

    @classmethod
    def from_problem(cls, problem: Mapping[str, JsonValue]) -> Failure:
        """Return the failure a stored problem object names (unknown reasons read as internal)."""
        reason = problem.get("reason")
        retry = problem.get("retry_after")
        return cls(
            next((known for known in _TABLE if known == reason), "internal"),
            float(retry) if isinstance(retry, int | float) and not isinstance(retry, bool) else None,
        )
