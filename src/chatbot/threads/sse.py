"""Server-sent events framing and `Accept` negotiation."""

from __future__ import annotations

import json
from collections.abc import Iterable

from chatbot.threads.runs import RunEvent

SSE_MEDIA_TYPE = "text/event-stream"
JSON_MEDIA_TYPE = "application/json"


def encode_events(events: Iterable[RunEvent]) -> bytes:
    """Frame events as SSE (`event:` + one-line JSON `data:`), UTF-8."""
    return "".join(
        f"event: {e.event}\ndata: {json.dumps(e.data, ensure_ascii=False, separators=(',', ':'))}\n\n" for e in events
    ).encode()


def _quality(accept: str, media: str) -> float:
    kind = media.split("/")[0]
    best, specificity = 0.0, -1
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        name = fields[0].lower()
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        level = 2 if name == media else 1 if name == f"{kind}/*" else 0 if name == "*/*" else -1
        if level > specificity:
            best, specificity = q, level
    return best


def wants_json(accept: str | None) -> bool:
    """Return True when the client prefers JSON over an event stream (SSE is the default)."""
    if not accept or not accept.strip():
        return False
    return _quality(accept, JSON_MEDIA_TYPE) > _quality(accept, SSE_MEDIA_TYPE)
