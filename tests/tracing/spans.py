"""Helpers of the tracing tests: an in-memory exporter, span lookups, and the content scan."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

NODES = ("load_memory", "retrieve", "generate", "write_memory")
# The graph's steps: memory and knowledge are read side by side, then one node a step.
STEPS = [{"load_memory", "retrieve"}, {"generate"}, {"write_memory"}]
# A leak shorter than this could be a coincidence (a node name inside a sentence).
LEAK_WINDOW = 12


def memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """Return a tracer provider exporting each span, as it ends, to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def run_span(spans: Sequence[ReadableSpan], run_id: str) -> ReadableSpan:
    """Return the one run span of `run_id`."""
    found = [s for s in spans if s.name == "chatbot.run" and (s.attributes or {}).get("chatbot.run_id") == run_id]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    """Return the spans whose parent is `parent`, in the order they started."""
    parent_id = parent.context.span_id
    found = [s for s in spans if s.parent is not None and s.parent.span_id == parent_id]
    return sorted(found, key=lambda s: s.start_time or 0)


def everything_said(spans: Iterable[ReadableSpan]) -> str:
    """Return every name, attribute value, event name and event attribute value of the spans, joined."""
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts.extend(str(v) for v in (span.attributes or {}).values())
        parts.append(span.status.description or "")
        for event in span.events:
            parts.append(event.name)
            parts.extend(str(v) for v in (event.attributes or {}).values())
        for link in span.links:
            parts.extend(str(v) for v in (link.attributes or {}).values())
    parts.extend(str(v) for span in spans for v in span.resource.attributes.values())
    return "\x00".join(parts)


def leaks(texts: Iterable[str], said: str) -> list[str]:
    """Return the pieces of `texts` (any LEAK_WINDOW characters in a row) found in `said`."""
    found = []
    for text in texts:
        if len(text) < LEAK_WINDOW:
            # Too short to search for inside other words ("en"): only as a whole value.
            if text and text in said.split("\x00"):
                found.append(text)
            continue
        for start in range(len(text) - LEAK_WINDOW + 1):
            piece = text[start : start + LEAK_WINDOW]
            if piece.strip() and piece in said:
                found.append(piece)
                break
    return found


def steps_of(nodes: Sequence[ReadableSpan]) -> list[set[str]]:
    """Return the names of node spans (in the order they started) by graph step, as `STEPS` has them."""
    names = [n.name for n in nodes]
    return [set(names[:2]), *({name} for name in names[2:])]


def by_name(nodes: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    """Return the one node span called `name`."""
    (found,) = [n for n in nodes if n.name == name]
    return found
