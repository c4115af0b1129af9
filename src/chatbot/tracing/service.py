"""What a run traces through: `Tracing` (per replica) and `RunTrace` (per run), and the no-op pair.

The package docstring (tracing/__init__.py) says what is traced and what never is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig

from chatbot.ids import RunId, TenantId, ThreadId

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
        self, *, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId, parent: Mapping[str, str] | None = None
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
