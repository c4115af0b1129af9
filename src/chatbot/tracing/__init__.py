"""Tracing of runs with OpenTelemetry: off unless `CHATBOT_TRACING` names an exporter.

A traced run is one span, with a child span per graph node and a grandchild per chat-model
call (tracing/_spans.py). Spans carry ids, statuses, model names, error classes and their
own timings, never text: not the message, the answer, memory values or chunk text.

The OpenTelemetry packages are an optional extra (`pip install 'chatbot[tracing]'`). This
module imports none of them: with tracing off a run pays two no-op calls and nothing of
the SDK is loaded, so a replica without the extra runs exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig

TracingMode = Literal["off", "otlp", "console"]


class RunTrace:
    """The trace of one run; this base traces nothing (tracing off). No method raises."""

    def configure(self, config: RunnableConfig) -> RunnableConfig:
        """Return the run's graph config, with the callback that opens node and model spans."""
        return config

    def end(self, *, status: str, ttft_ms: float | None, error: BaseException | None) -> None:
        """Close the run's span with its outcome (and any node or model span left open)."""


class Tracing:
    """The replica's tracer of runs; this base traces nothing (tracing off)."""

    def start_run(
        self, *, thread_id: str, run_id: str, tenant_id: str, parent: Mapping[str, str] | None = None
    ) -> RunTrace:
        """Open the span of a run that is starting.

        `parent` holds the request's W3C `traceparent` (and `tracestate`) headers, when the
        backend sent them: the run's span then joins the backend's trace.
        """
        return NO_TRACE

    def shutdown(self) -> None:
        """Export what is still buffered and stop the exporter (the replica is stopping)."""


NO_TRACE = RunTrace()
NO_TRACING = Tracing()


def tracing_for(mode: TracingMode, *, tracer_provider: Any = None) -> Tracing:
    """Return the tracer of runs for a `CHATBOT_TRACING` mode, or for a given TracerProvider.

    `tracer_provider` (an OpenTelemetry SDK `TracerProvider`) wins over the mode; the
    caller keeps it and shuts it down (tests pass one that exports to memory).
    """
    if tracer_provider is None and mode == "off":
        return NO_TRACING
    try:
        # Imported only now: the OpenTelemetry SDK is an optional extra.
        from chatbot.tracing._spans import OtelTracing
    except ImportError as exc:
        raise RuntimeError(
            f"CHATBOT_TRACING={mode} needs the OpenTelemetry SDK: pip install 'chatbot[tracing]'"
        ) from exc

    if tracer_provider is not None:
        return OtelTracing(tracer_provider, owns_provider=False)
    return OtelTracing.for_mode(mode)
