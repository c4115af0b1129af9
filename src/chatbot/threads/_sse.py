"""Server-sent events: framing with resumable ids, keep-alives, and `Accept` negotiation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence

from chatbot.ids import RunId
from chatbot.threads._stream import TERMINAL, Listener, StreamEvent

SSE_MEDIA_TYPE = "text/event-stream"
JSON_MEDIA_TYPE = "application/json"
KEEP_ALIVE = b": keep-alive\n\n"

_encode: Callable[[object], str] = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# JSON leaves these unescaped, and line readers that follow `str.splitlines` (httpx's
# `iter_lines`, which chatbot.client uses) end a line at each: a `data:` line holding one
# would reach such a client cut in two. Escaped, the JSON decodes to the same text.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _dumps(value: object) -> str:
    return _encode(value).translate(_LINE_BREAKS)


def coalesce(events: Sequence[StreamEvent]) -> list[StreamEvent]:
    """Merge runs of consecutive `token` events into one (their text joined, the last offset).

    Deltas that queued up while the reader was busy go out as one event: fewer JSON
    encodings and fewer bytes at hundreds of streams, and the concatenated text and the
    final offset are unchanged, so the contract's token rule still holds.
    """
    merged: list[StreamEvent] = []
    pieces: list[str] = []
    for event in events:
        if event.event == "token" and merged and merged[-1].event == "token":
            pieces.append(event.piece)
            merged[-1] = StreamEvent.token("".join(pieces), event.offset)
            continue
        merged.append(event)
        pieces = [event.piece] if event.event == "token" else []
    return merged


def encode_events(run_id: RunId, events: Sequence[StreamEvent]) -> bytes:
    """Frame events as SSE: `id: <run_id>:<offset>`, `event:` and one-line JSON `data:`."""
    return "".join(
        f"id: {run_id}:{e.offset}\nevent: {e.event}\ndata: {_dumps(e.data)}\n\n" for e in coalesce(events)
    ).encode()


async def sse_body(
    listener: Listener, keepalive: float, flush: float = 0.0, on_close: Callable[[], object] | None = None
) -> AsyncIterator[bytes]:
    """Yield a listener's events as SSE until `end` or `error`, with a comment while none is due.

    After the first token, tokens are held for up to `flush` seconds and sent together:
    every event sent costs a trip through the ASGI middleware and a socket write, and at
    hundreds of streams that per-event work is most of a replica's CPU
    (docs/measurements/performance.md). The first token and the terminal event are never held.
    """
    # If the client goes away this generator is cancelled; the run's own task goes on
    # and persists the turn, and its lock is released when it ends.
    streaming = False
    try:
        while True:
            try:
                async with asyncio.timeout(keepalive):
                    batch = await listener.next_batch()
            except TimeoutError:
                yield KEEP_ALIVE
                continue
            if streaming and flush > 0 and batch[-1].event == "token":
                # Held until the flush is due or a non-token (the end, say) is queued.
                batch = await listener.hold(batch, flush)
            yield encode_events(listener.run_id, batch)
            if batch[-1].event in TERMINAL:
                return
            streaming = streaming or any(e.event == "token" for e in batch)
    finally:
        if on_close is not None:
            on_close()


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
