"""A run's event stream: numbered by answer offset, fanned out to every listener.

Every event carries the answer's offset: how many characters (code points) the `token`
events up to and including it have delivered. The offset is the event's SSE id
(`<run_id>:<offset>`), so a listener that lost its connection can rejoin from any replica
and receive the answer from where it stopped (threads/rejoin.py).

A run publishes into `RunStream`; each listener (the request that started the run, a
rejoin on this replica, the JSON waiter) has a `Listener` with a queue of its own, fed
synchronously by `publish`, so nobody misses an event and a slow reader holds no one up.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

TERMINAL = frozenset({"end", "error"})


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a run's stream and the answer offset after it."""

    event: str
    data: dict[str, Any]
    offset: int


class Listener:
    """One reader of a run's events, from a given answer offset on."""

    def __init__(self, run_id: str, thread_id: str, delivered: int, *, progress: bool) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.queue: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self.delivered = delivered
        """Answer characters this listener already has (sent, or held by the client)."""
        self._progress = progress

    def offer(self, event: StreamEvent) -> None:
        """Queue an event, trimming any answer text this listener already has."""
        if event.event == "token":
            content: str = event.data["content"]
            start = event.offset - len(content)
            if event.offset <= self.delivered:
                return
            if start < self.delivered:
                event = StreamEvent("token", {"content": content[self.delivered - start :]}, event.offset)
            self.delivered = event.offset
        elif event.event == "progress" and not self._progress:
            return
        self.queue.put_nowait(event)

    async def next_batch(self) -> list[StreamEvent]:
        """Wait for at least one event; return it with whatever else is already queued."""
        batch = [await self.queue.get()]
        while not self.queue.empty():
            batch.append(self.queue.get_nowait())
        return batch

    async def terminal(self) -> StreamEvent:
        """Wait for the run's `end` or `error` event."""
        while True:
            for event in await self.next_batch():
                if event.event in TERMINAL:
                    return event


class RunStream:
    """The events of one run in flight on this replica."""

    def __init__(self, run_id: str, thread_id: str) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self._pieces: list[str] = []
        self.offset = 0
        self.terminal: StreamEvent | None = None
        self._listeners: set[Listener] = set()

    @property
    def shown(self) -> str:
        """Return the answer text published so far (what the user was shown)."""
        return "".join(self._pieces)

    @property
    def metadata(self) -> StreamEvent:
        """Return the stream's first event."""
        return StreamEvent("metadata", {"run_id": self.run_id, "thread_id": self.thread_id}, 0)

    def publish(self, event: str, data: dict[str, Any]) -> None:
        """Number an event by the answer offset and hand it to every listener."""
        if event == "token":
            self._pieces.append(data["content"])
            self.offset += len(data["content"])
        numbered = StreamEvent(event, data, self.offset)
        if event in TERMINAL:
            self.terminal = numbered
        for listener in self._listeners:
            listener.offer(numbered)

    def listen(self, delivered: int = 0, *, from_start: bool = False) -> Listener:
        """Return a listener that gets the answer from `delivered` on, then every later event.

        `from_start` is for the request that started the run: it gets `metadata` and the
        progress events too. A rejoining listener gets `metadata`, then what the answer
        already holds past its offset as one token, then the live tokens and the end.
        """
        listener = Listener(self.run_id, self.thread_id, delivered, progress=from_start)
        metadata = self.metadata
        listener.queue.put_nowait(StreamEvent(metadata.event, metadata.data, delivered))
        if self.offset > delivered:
            listener.offer(StreamEvent("token", {"content": "".join(self._pieces)}, self.offset))
        if self.terminal is not None:
            listener.offer(self.terminal)
        else:
            self._listeners.add(listener)
        return listener

    def leave(self, listener: Listener) -> None:
        """Stop feeding a listener (its client went away)."""
        self._listeners.discard(listener)
