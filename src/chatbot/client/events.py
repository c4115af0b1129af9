"""Server-sent events: decoding the stream, and following a run across one rejoin."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chatbot.responses import RunEnd

TERMINAL = ("end", "error")


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a run's stream: its name, its `id:` (`<run_id>:<offset>`) and its JSON data."""

    event: str
    id: str | None
    data: dict[str, Any]

    def end(self) -> RunEnd:
        """Return the data of an `end` event as a typed model."""
        if self.event != "end":
            raise ValueError(f"a {self.event!r} event is not the end of a run")
        return RunEnd.model_validate(self.data)


@dataclass(slots=True)
class SSEDecoder:
    """Turn SSE lines into events (the WHATWG rules this service needs: comments, `id`, one-line data)."""

    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def feed(self, line: str) -> Event | None:
        """Take one line (without its line break); return an event when a blank line completes one."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the service's keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def decode(self, lines: Iterable[str]) -> Iterable[Event]:
        """Yield the events of a sequence of lines."""
        for line in lines:
            event = self.feed(line)
            if event is not None:
                yield event

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._event = ""
            return None
        raw = "\n".join(self._data)
        try:
            data = json.loads(raw)
        except ValueError:
            data = {"raw": raw}
        event = Event(self._event or "message", self._id, data if isinstance(data, dict) else {"value": data})
        self._event, self._data = "", []
        return event  # the last id stays: per the spec, it carries over to later events without one


@dataclass(slots=True)
class RunFollower:
    """Track where a consumer is in a run's stream, so a rejoin continues exactly there.

    The offset counts the answer's code points delivered by `token` events, the same
    measure the service's `id:` lines carry, so a rejoin from it repeats nothing and skips
    nothing. A rejoined stream starts with `metadata` again; the consumer saw it already.
    """

    thread_id: str
    run_id: str | None = None
    offset: int = 0
    last_id: str | None = None
    metadata_seen: bool = False
    finished: bool = False

    @classmethod
    def joining(cls, thread_id: str, run_id: str, last_event_id: str | None) -> RunFollower:
        """Return a follower of a rejoin that starts after `last_event_id` (from the start without one)."""
        offset = 0
        if last_event_id:
            _, _, tail = last_event_id.rpartition(":")
            # ASCII digits only: str.isdigit() also takes "²" or "٣", which int() refuses or misreads.
            offset = int(tail) if tail.isascii() and tail.isdigit() else 0
        return cls(thread_id=thread_id, run_id=run_id, offset=offset, last_id=last_event_id)

    def admit(self, event: Event) -> bool:
        """Record an event; return False for one the consumer must not see again."""
        if event.id:
            self.last_id = event.id
        if event.event == "metadata":
            if event.data.get("run_id"):
                self.run_id = str(event.data["run_id"])
            if self.metadata_seen:
                return False
            self.metadata_seen = True
        elif event.event == "token":
            self.offset += len(str(event.data.get("content", "")))
        elif event.event in TERMINAL:
            self.finished = True
        return True

    @property
    def last_event_id(self) -> str | None:
        """Return the `Last-Event-ID` a rejoin sends: the service's last id, else the offset counted here."""
        if self.run_id is None:
            return None
        if self.last_id and self.last_id.startswith(f"{self.run_id}:"):
            return self.last_id
        return f"{self.run_id}:{self.offset}"
