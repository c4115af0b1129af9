"""Prometheus metrics of the service (served at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RUNS = Counter("chatbot_runs_total", "Runs by terminal status (answered, clarifying, escalate, error).", ["status"])
RUN_SECONDS = Histogram(
    "chatbot_run_duration_seconds",
    "Wall time of a run, lock taken to end sent.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
RUNS_REJECTED = Counter("chatbot_runs_rejected_total", "Runs refused before starting.", ["reason"])
PII_REJECTED = Counter("chatbot_memory_pii_rejected_total", "Memory candidates dropped by the PII guard.", ["category"])
MEMORY_WRITES = Counter("chatbot_memory_writes_total", "Memory jobs by outcome.", ["outcome"])
WINDOW_SHORTENED = Counter(
    "chatbot_window_shortened_total", "Model windows that had to shorten part of the current turn.", ["part"]
)
SUMMARY_FOLDS = Counter("chatbot_summary_folds_total", "Rolling-summary folds by outcome.", ["outcome"])

# Expose every terminal status from the start, so dashboards see zeros rather than gaps.
for _status in ("answered", "clarifying", "escalate", "error"):
    RUNS.labels(_status)

# Failed chat-model calls, by the provider's exception class and HTTP status ("none" when
# the exception carries none, e.g. a timeout or a connection error): a revoked key, a
# provider rate limit and a provider outage need different responses at 3 a.m.
MODEL_ERRORS = Counter(
    "chatbot_model_errors_total",
    "Chat-model calls that failed, by the provider's exception class and HTTP status.",
    ["error_class", "status"],
)
