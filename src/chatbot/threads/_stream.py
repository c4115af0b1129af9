"""A run's event stream: numbered by answer offset, fanned out to every listener.

Every event carries the answer's offset: how many characters (code points) the `token`
events up to and including it have delivered. The offset is the event's SSE id
(`<run_id>:<offset>`), so a listener that lost its connection can rejoin from any replica
and receive the answer from where it stopped (threads/rejoin.py).

A run publishes into `RunStream`; each listener (the request that started the run, a
rejoin on this replica, the JSON waiter) has a `Listener` with a queue of its own, fed
synchronously by `publish`, so nobody misses an event and a slow reader holds no one up.

Every event's data is built here, by `StreamEvent`'s constructors (`metadata`, `token`,
`of` for the graph's events, `end`, `error`): the wire format has one author.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import JsonValue

from chatbot.agent.outcome import GraphEvent, GraphOutcome, Token
from chatbot.failures import Failure
from chatbot.ids import RunId, ThreadId
from chatbot.responses import MessageRef, RunEnd

TERMINAL = frozenset({"end", "error"})


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a run's stream and the answer offset after it."""

    event: str
    data: dict[str, JsonValue]
    offset: int

    @property
    def piece(self) -> str:
        """Return a token event's piece of the answer ("" for any other event)."""
        content = self.data.get("content") if self.event == "token" else None
        return content if isinstance(content, str) else ""

    @classmethod
    def metadata(cls, run_id: RunId, thread_id: ThreadId, offset: int = 0) -> StreamEvent:
        """Return the stream's first event: which run and thread it is."""
        return cls("metadata", {"run_id": run_id, "thread_id": thread_id}, offset)

    @classmethod
    def token(cls, content: str, offset: int) -> StreamEvent:
        """Return a piece of the answer ending at answer offset `offset`."""
        return cls("token", {"content": content}, offset)

    @classmethod
    def of(cls, event: GraphEvent, offset: int) -> StreamEvent:
        """Return one of the graph's events (a token, a stage's progress) as the stream sends it."""
        return cls(event.name, event.data(), offset)

    @classmethod
    def end(cls, run_id: RunId, thread_id: ThreadId, outcome: GraphOutcome, offset: int) -> StreamEvent:
        """Return the `end` event of a run that answered (its status, answer, citations, hand-off)."""
        return cls("end", end_data(run_id, thread_id, outcome), offset)

    @classmethod
    def error(cls, failure: Failure, offset: int) -> StreamEvent:
        """Return the `error` event of a failed run: the failure's problem details."""
        return cls("error", failure.problem(), offset)


def end_data(run_id: RunId, thread_id: ThreadId, outcome: GraphOutcome) -> dict[str, JsonValue]:
    """Return the `end` event's data for a run's outcome: a `responses.RunEnd`, as the stream writes it."""
    if outcome.status == "error" or outcome.message_id is None:
        raise ValueError("an `end` event is for a run that answered; a failed one ends with `error`")
    end = RunEnd(
        run_id=run_id,
        thread_id=thread_id,
        status=outcome.status,
        message=MessageRef(id=outcome.message_id, content=outcome.answer),
        citations=outcome.citations,
        handoff_context=outcome.handoff_context,
    )
    return end.model_dump(mode="json")


class Listener:
    """One reader of a run's events, from a given answer offset on."""

    def __init__(self, run_id: RunId, thread_id: ThreadId, delivered: int, *, progress: bool) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.queue: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self.delivered = delivered
        """Answer characters this listener already has (sent, or held by the client)."""
        self._progress = progress
        self._urgent = asyncio.Event()
        """Set when an event other than a token is queued: a reader holding tokens sends at once."""

    def offer(self, event: StreamEvent) -> None:
        """Queue an event, trimming any answer text this listener already has."""
        if event.event == "token":
            content = event.piece
            start = event.offset - len(content)
            if event.offset <= self.delivered:
                return
            if start < self.delivered:
                event = StreamEvent.token(content[self.delivered - start :], event.offset)
            self.delivered = event.offset
        elif event.event == "progress" and not self._progress:
            return
        else:
            self._urgent.set()
        self.queue.put_nowait(event)

    async def next_batch(self) -> list[StreamEvent]:
        """Wait for at least one event; return it with whatever else is already queued."""
        batch = [await self.queue.get()]
        return self._drain(batch)

    def _drain(self, batch: list[StreamEvent]) -> list[StreamEvent]:
        while not self.queue.empty():
            batch.append(self.queue.get_nowait())
        self._urgent.clear()
        return batch

    async def hold(self, batch: list[StreamEvent], timeout: float) -> list[StreamEvent]:
        """Add to `batch` what is queued after up to `timeout` seconds, or sooner if a non-token is.

        Tokens arriving meanwhile do not wake the reader: one wake-up per flush, not per piece.
        """
        if not self._urgent.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._urgent.wait()
            except TimeoutError:
                pass
        return self._drain(batch)

    async def terminal(self) -> StreamEvent:
        """Wait for the run's `end` or `error` event."""
        while True:
            for event in await self.next_batch():
                if event.event in TERMINAL:
                    return event


class RunStream:
    """The events of one run in flight on this replica."""

    def __init__(self, run_id: RunId, thread_id: ThreadId) -> None:
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

    def publish(self, event: GraphEvent) -> None:
        """Number one of the graph's events by the answer offset and hand it to every listener."""
        if isinstance(event, Token):
            self._pieces.append(event.content)
            self.offset += len(event.content)
            self._offer(StreamEvent.token(event.content, self.offset))
        else:
            self._offer(StreamEvent.of(event, self.offset))

    def end(self, outcome: GraphOutcome) -> None:
        """Send the `end` event of a run that answered."""
        self._finish(StreamEvent.end(self.run_id, self.thread_id, outcome, self.offset))

    def fail(self, failure: Failure) -> None:
        """Send the `error` event of a run that failed."""
        self._finish(StreamEvent.error(failure, self.offset))

    def _finish(self, terminal: StreamEvent) -> None:
        self.terminal = terminal
        self._offer(terminal)

    def _offer(self, numbered: StreamEvent) -> None:
        for listener in self._listeners:
            listener.offer(numbered)

    def listen(self, delivered: int = 0, *, from_start: bool = False) -> Listener:
        """Return a listener that gets the answer from `delivered` on, then every later event.

        `from_start` is for the request that started the run: it gets `metadata` and the
        progress events too. A rejoining listener gets `metadata`, then what the answer
        already holds past its offset as one token, then the live tokens and the end.
        """
        listener = Listener(self.run_id, self.thread_id, delivered, progress=from_start)
        listener.queue.put_nowait(StreamEvent.metadata(self.run_id, self.thread_id, delivered))
        if self.offset > delivered:
            listener.offer(StreamEvent.token(self.shown, self.offset))
        if self.terminal is not None:
            listener.offer(self.terminal)
        else:
            self._listeners.add(listener)
        return listener

    def leave(self, listener: Listener) -> None:
        """Stop feeding a listener (its client went away)."""
        self._listeners.discard(listener)
