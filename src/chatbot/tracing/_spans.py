"""OpenTelemetry spans of a run, its graph nodes and its model calls (imported only when tracing is on).

The node and model spans come from a LangChain callback handler put in the run's config:
LangGraph reports each node as a chain whose name is its `langgraph_node` metadata (and
whose tags hold `graph:step:N`), and every chat-model call inside a node carries the
node's `langgraph_checkpoint_ns`, which is how a model span finds its parent. No node
needs to know about tracing.

What goes into a span is chosen here, key by key: ids, node and model names, statuses,
error class names, token counts and the spans' own timings. Never inputs, outputs,
exception messages (a provider's message can quote the user) or metadata wholesale.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, UsageMetadata
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import RunnableConfig
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from chatbot.agent.modelcall import http_status
from chatbot.ids import RunId, TenantId, ThreadId
from chatbot.tracing.service import NO_TRACE, RunTrace, Tracing

log = logging.getLogger(__name__)

TRACER_NAME = "chatbot"
RUN_SPAN = "chatbot.run"
DEFAULT_SERVICE_NAME = "chatbot"
# W3C trace context only, whatever OTEL_PROPAGATORS says: the backend is the one caller.
_W3C = TraceContextTextMapPropagator()


class OtelTracing(Tracing):
    """Trace runs into an OpenTelemetry tracer provider."""

    def __init__(self, provider: TracerProvider, *, owns_provider: bool) -> None:
        self._provider = provider
        self._owns_provider = owns_provider
        self._tracer = provider.get_tracer(TRACER_NAME)

    @classmethod
    def for_mode(cls, mode: str) -> OtelTracing:
        """Return a tracer of runs with its own provider exporting as `mode` says.

        The exporter reads the standard `OTEL_EXPORTER_OTLP_*` variables (endpoint,
        headers, timeout) and the batch processor `OTEL_BSP_*`. The provider is the
        replica's own, not the global one: FastAPI's native telemetry turns itself on when
        a global provider exists, and its logs record exception messages.
        """
        provider = TracerProvider(resource=_resource())
        provider.add_span_processor(BatchSpanProcessor(_exporter(mode)))
        return cls(provider, owns_provider=True)

    def start_run(
        self, *, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId, parent: Mapping[str, str] | None = None
    ) -> RunTrace:
        """Open the span of a run that is starting; on any failure, trace nothing rather than fail the run.

        With the backend's `traceparent`, the span is a child of the backend's span; a
        missing or malformed header makes it the root of a trace of its own.
        """
        try:
            span = self._tracer.start_span(
                RUN_SPAN,
                context=_W3C.extract(parent) if parent else None,
                kind=SpanKind.INTERNAL,
                attributes={"chatbot.thread_id": thread_id, "chatbot.run_id": run_id, "chatbot.tenant_id": tenant_id},
            )
            return OtelRunTrace(self._tracer, span)
        except Exception as exc:  # the run starts after this returns: it must not depend on tracing
            log.warning("run span not started", extra={"run_id": run_id, "error": type(exc).__name__})
            return NO_TRACE

    def shutdown(self) -> None:
        """Export what is still buffered and stop the exporter, if this provider is ours."""
        if self._owns_provider:
            self._provider.shutdown()


class OtelRunTrace(RunTrace):
    """The span of one run and the callback that hangs node and model spans under it."""

    def __init__(self, tracer: trace.Tracer, span: Span) -> None:
        self.span = span
        self.handler = GraphSpans(tracer, trace.set_span_in_context(span))

    def configure(self, config: RunnableConfig) -> RunnableConfig:
        """Return the run's graph config with the span callback added to its callbacks."""
        callbacks = config.get("callbacks")
        if callbacks is None:
            return {**config, "callbacks": [self.handler]}
        if isinstance(callbacks, list):
            return {**config, "callbacks": [*callbacks, self.handler]}
        # A callback manager: give it our handler too, inherited by every child run.
        manager = callbacks.copy()
        manager.add_handler(self.handler, inherit=True)
        return {**config, "callbacks": manager}

    def end(self, *, status: str, ttft_ms: float | None, error: BaseException | None) -> None:
        """Close the run's span with its outcome (and any node or model span left open)."""
        try:
            self.handler.close(error)
            _mark(self.span, error)
            # The run's own status (answered, clarifying, escalate, error) over _mark's ok/error.
            self.span.set_attribute("chatbot.status", status)
            if ttft_ms is not None:
                self.span.set_attribute("chatbot.ttft_ms", ttft_ms)
            self.span.end()
        except Exception as exc:  # called from the run's `finally`: the run's own log line comes next
            log.warning("run span not ended", extra={"error": type(exc).__name__})


class GraphSpans(BaseCallbackHandler):
    """Open a span per graph node and per chat-model call, as LangChain reports them."""

    # Called in the event loop, not in an executor thread: each call only starts or ends a span.
    run_inline = True
    # Besides chains and chat models, nothing LangChain reports is traced.
    ignore_retriever = True
    ignore_agent = True
    ignore_retry = True
    ignore_custom_event = True

    def __init__(self, tracer: trace.Tracer, run_context: Any) -> None:
        self._tracer = tracer
        self._run_context = run_context
        self._nodes: dict[UUID, Span] = {}
        self._node_by_namespace: dict[str, Span] = {}
        self._models: dict[UUID, Span] = {}
        self._closed = False

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Open a node's span when the chain starting is a graph node (not a chain inside one)."""
        if self._closed or not metadata:
            return
        node = metadata.get("langgraph_node")
        if node is None or kwargs.get("name") != node or not any(t.startswith("graph:step:") for t in tags or ()):
            return
        span = self._tracer.start_span(
            str(node),
            context=self._run_context,
            kind=SpanKind.INTERNAL,
            attributes={"langgraph.node": str(node), "langgraph.step": int(metadata.get("langgraph_step", 0))},
        )
        self._nodes[run_id] = span
        namespace = metadata.get("langgraph_checkpoint_ns")
        if isinstance(namespace, str):
            self._node_by_namespace[namespace] = span

    def on_chain_end(
        self, outputs: dict[str, Any], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Close a node's span as done; a node that recorded a failed outcome (the model's) as failed."""
        outcome = outputs.get("outcome") if isinstance(outputs, dict) else None
        failure = outcome.get("failure") if isinstance(outcome, dict) and outcome.get("status") == "error" else None
        self._end_node(run_id, _RecordedFailure(str(failure.get("reason"))) if isinstance(failure, dict) else None)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Close a node's span as failed, naming the error's class."""
        self._end_node(run_id, error)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Open a model call's span under the node that makes it."""
        if self._closed:
            return
        metadata = metadata or {}
        node = self._node_by_namespace.get(str(metadata.get("langgraph_checkpoint_ns")))
        if node is None or not node.is_recording():
            # Not inside a node of this run that is still going: e.g. the memory writer's
            # extraction, a task that inherited the run's callbacks and outlives its node.
            return
        model = str(metadata.get("ls_model_name") or metadata.get("ls_provider") or "unknown")
        attributes: dict[str, str] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        if metadata.get("ls_provider"):
            attributes["gen_ai.provider.name"] = str(metadata["ls_provider"])
        span = self._tracer.start_span(
            f"chat {model}", context=trace.set_span_in_context(node), kind=SpanKind.CLIENT, attributes=attributes
        )
        self._models[run_id] = span

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Close a model call's span as done, with its token counts when the provider gave them."""
        usage = _usage(response)
        counts = (
            {}
            if usage is None
            else {
                "gen_ai.usage.input_tokens": int(usage.get("input_tokens", 0)),
                "gen_ai.usage.output_tokens": int(usage.get("output_tokens", 0)),
            }
        )
        self._end_model(run_id, None, counts)

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Close a model call's span as failed: the error's class and the provider's HTTP status."""
        status = http_status(error)
        self._end_model(run_id, error, {} if status is None else {"http.response.status_code": status})

    def close(self, error: BaseException | None) -> None:
        """End every span still open (a cancelled run) and ignore whatever is reported later."""
        self._closed = True
        left = [*self._models.values(), *self._nodes.values()]
        self._models.clear()
        self._nodes.clear()
        self._node_by_namespace.clear()
        for span in left:
            _end(span, error or _Unfinished())

    def _end_node(self, run_id: UUID, error: BaseException | None) -> None:
        _end(self._nodes.pop(run_id, None), error)

    def _end_model(self, run_id: UUID, error: BaseException | None, attributes: dict[str, int]) -> None:
        span = self._models.pop(run_id, None)
        if span is not None:
            span.set_attributes(attributes)
        _end(span, error)


class _Unfinished(Exception):
    """A span that was still open when its run ended."""


class _RecordedFailure(Exception):
    """A node that ended by recording a failure (its reason, e.g. model_failed) instead of raising."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _end(span: Span | None, error: BaseException | None) -> None:
    """Mark and end a span that is still open (None: already closed, or never opened)."""
    if span is not None:
        _mark(span, error)
        span.end()


def _mark(span: Span, error: BaseException | None) -> None:
    """Set a span's outcome: its status, and on failure the error's class (never its message)."""
    if error is None:
        span.set_attribute("chatbot.status", "ok")
        return
    span.set_attribute("chatbot.status", "error")
    span.set_attribute("error.type", error.reason if isinstance(error, _RecordedFailure) else type(error).__name__)
    span.set_status(Status(StatusCode.ERROR))


def _usage(response: LLMResult) -> UsageMetadata | None:
    for generations in response.generations:
        for generation in generations:
            message = generation.message if isinstance(generation, ChatGeneration) else None
            usage = message.usage_metadata if isinstance(message, AIMessage) else None
            if usage:
                return usage
    return None


def _resource() -> Resource:
    """Return the service's resource: OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, else `chatbot`."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def _exporter(mode: str) -> SpanExporter:
    if mode == "console":
        return ConsoleSpanExporter()
    if mode == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise RuntimeError("CHATBOT_TRACING=otlp needs the OTLP exporter: pip install 'chatbot[tracing]'") from exc
        return OTLPSpanExporter()
    raise ValueError(f"unknown tracing mode {mode!r}")
