"""Prometheus metrics of the service (served at /metrics)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from chatbot.ids import TenantId

RUNS = Counter(
    "chatbot_runs_total", "Runs by terminal status (answered, clarifying, escalate, error, cancelled).", ["status"]
)
RUN_SECONDS = Histogram(
    "chatbot_run_duration_seconds",
    "Wall time of a run, lock taken to end sent.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
# Summed over a replica's worker processes (livesum): what the dashboard plots as load.
RUNS_IN_FLIGHT = Gauge("chatbot_runs_in_flight", "Runs executing on this replica.", multiprocess_mode="livesum")
RUNS_REJECTED = Counter("chatbot_runs_rejected_total", "Runs refused before starting.", ["reason"])
PII_REJECTED = Counter("chatbot_memory_pii_rejected_total", "Memory candidates dropped by the PII guard.", ["category"])
INSTRUCTIONS_REFUSED = Counter(
    "chatbot_memory_instructions_refused_total",
    "Memory statements refused as instructions to the assistant rather than facts about the user.",
    ["kind"],
)
MEMORY_WRITES = Counter("chatbot_memory_writes_total", "Memory jobs by outcome.", ["outcome"])
WINDOW_SHORTENED = Counter(
    "chatbot_window_shortened_total", "Model windows that had to shorten part of the current turn.", ["part"]
)
SUMMARY_FOLDS = Counter("chatbot_summary_folds_total", "Rolling-summary folds by outcome.", ["outcome"])

# Expose every terminal status from the start, so dashboards see zeros rather than gaps.
for _status in ("answered", "clarifying", "escalate", "error", "cancelled"):
    RUNS.labels(_status)

# Failed chat-model calls, by the provider's exception class and HTTP status ("none" when
# the exception carries none, e.g. a timeout or a connection error): a revoked key, a
# provider rate limit and a provider outage need different responses at 3 a.m.
MODEL_ERRORS = Counter(
    "chatbot_model_errors_total",
    "Chat-model calls that failed, by the provider's exception class and HTTP status.",
    ["error_class", "status"],
)

# Every model call by what became of it: ok, incomplete (stopped short), refused, unusable
# (output that does not fit the schema), timeout, rate_limited, failed, cancelled. `kind`
# is answer, summary or memory: extraction and summaries may use cheaper models.
MODEL_CALLS = Counter(
    "chatbot_model_calls_total", "Model calls by model, kind and outcome.", ["model", "kind", "outcome"]
)
MODEL_CALL_SECONDS = Histogram(
    "chatbot_model_call_duration_seconds",
    "Wall time of a model call, request to its last piece.",
    ["kind"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
)
# Tokens as the providers reported them (`direction`: input, output, cached_input).
MODEL_TOKENS = Counter(
    "chatbot_model_tokens_total",
    "Model tokens by tenant, model, kind of call and direction.",
    ["tenant_id", "model", "kind", "direction"],
)


def count_tokens(
    tenant_id: TenantId, model: str, kind: str, input_tokens: int, output_tokens: int, cached: int
) -> None:
    """Add one model call's reported tokens to `chatbot_model_tokens_total` (zero counts add no series).

    Never raises: a count that is not a positive int (a provider's garbled report) adds nothing,
    where prometheus_client would raise on a negative increment.
    """
    for direction, count in (("input", input_tokens), ("output", output_tokens), ("cached_input", cached)):
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            MODEL_TOKENS.labels(tenant_id, model, kind, direction).inc(count)


# A chain entry that failed before its first answer token, so the next one answered.
MODEL_FALLBACKS = Counter("chatbot_model_fallbacks_total", "Fallbacks to the next model of the chain.", ["reason"])
RUN_TTFT_SECONDS = Histogram(
    "chatbot_run_first_token_seconds",
    "Time from a run's start to its first answer token.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20),
)

# With several worker processes each has its own counters; prometheus_client's
# multiprocess mode keeps them in files under PROMETHEUS_MULTIPROC_DIR that /metrics sums,
# so a scrape sees the replica's totals whichever worker answers it.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def exposition() -> bytes:
    """Return the metrics in the Prometheus text format, summed over worker processes when there are several."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest()


@contextmanager
def worker_metrics(workers: int) -> Iterator[Path | None]:
    """Give worker processes a fresh shared metrics directory for the life of the server.

    An operator's PROMETHEUS_MULTIPROC_DIR is used (and emptied of a previous run's files,
    which would otherwise be added to this run's counts); without one, and with more than
    one worker, a temporary directory is made and removed on exit. Must run before the
    workers start: prometheus_client picks its storage when it is first imported.
    """
    configured = os.environ.get(MULTIPROC_ENV)
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
        yield path
        return
    if workers <= 1:
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="chatbot-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


BUDGET_REFUSALS = Counter(
    "chatbot_budget_refusals_total",
    "Model calls refused by a budget before they were sent, by the budget's scope and period and the call's kind.",
    ["scope", "period", "kind"],
)
BUDGET_SHARE_LEFT = Gauge(
    "chatbot_budget_share_left",
    "Smallest share of a tenant budget left after the latest reservation (0 to 1).",
    ["tenant_id"],
    multiprocess_mode="mostrecent",
)
