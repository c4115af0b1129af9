"""A remembered fact as the store keeps it: the one type that reads and writes a fact's JSON.

A current fact is an item of the user's facts namespace (its key is the fact's id); a closed
version, one a later fact of the same kind replaced, is an item of the fact history
(memory/namespaces.py). Every module that reads either from the store parses it here
(`from_stored`, validated) and writes it from here (`stored`), so the stored shape is
spelled once:

    fact:    {"text", "category", "key", "source": {"thread_id", "run_id"}, "valid_from"}
    closed:  the same, plus "fact_id" (the fact it was a version of), "valid_until", "closed_by"

Facts stored before sources and belief times were kept have neither `source` nor
`valid_from`; they read as None, and the readers fall back as they always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, JsonValue

from chatbot.ids import ThreadId
from chatbot.responses import FactSource
from chatbot.timestamps import rfc3339

__all__ = ["ClosedFact", "Fact", "FactSource", "stored_source"]


def _complete_or_none(value: object) -> object:
    """Read a source naming both a thread and a run; anything less is no source (None)."""
    if isinstance(value, FactSource) or (isinstance(value, Mapping) and value.get("thread_id") and value.get("run_id")):
        return value
    return None


def _text_or_none(value: object) -> object:
    """Read an empty moment as none kept."""
    return value or None


_Source = Annotated[FactSource | None, BeforeValidator(_complete_or_none)]
_Moment = Annotated[str | None, BeforeValidator(_text_or_none)]
"""A moment as stored: RFC 3339 in UTC with microseconds (`timestamps.rfc3339`), kept as written."""


def stored_source(source: FactSource) -> dict[str, str]:
    """Return a turn as facts (and the profile's sources) store it."""
    return {"thread_id": source.thread_id, "run_id": source.run_id}


def _json(source: FactSource) -> dict[str, JsonValue]:
    return dict(stored_source(source))


class Fact(BaseModel):
    """A current fact about the user, as the facts namespace keeps it."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    category: str = "general"
    key: str = ""
    """What the fact is about; a later fact with the same key replaces this one."""
    source: _Source = None
    """The turn that last wrote the fact; None for facts stored before sources were kept, or
    once its thread was deleted."""
    valid_from: _Moment = None
    """Since when the fact is believed; None for facts stored before this was kept."""

    def stored(self) -> dict[str, JsonValue]:
        """Return the fact as the store keeps it (an absent source or moment is not written)."""
        value: dict[str, JsonValue] = {"text": self.text, "category": self.category, "key": self.key}
        if self.source is not None:
            value["source"] = _json(self.source)
        if self.valid_from is not None:
            value["valid_from"] = self.valid_from
        return value

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> Fact:
        """Return a stored fact, validated (a field of another type raises `ValidationError`)."""
        return cls.model_validate(dict(stored))

    def believed_since(self, written: datetime) -> str:
        """Return since when the fact is believed, as stored; its first write for a fact stored before this was kept."""
        return self.valid_from or rfc3339(written, timespec="microseconds")

    def closed(self, fact_id: str, written: datetime, until: str, by: FactSource) -> ClosedFact:
        """Return this fact, first written at `written`, as a version the turn `by` closed at `until`."""
        believed = self.model_dump(exclude={"valid_from"})
        return ClosedFact(
            **believed, fact_id=fact_id, valid_from=self.believed_since(written), valid_until=until, closed_by=by
        )

    def without_thread(self, thread_id: ThreadId) -> Fact:
        """Return the fact with no source naming `thread_id` (the thread was deleted; the fact stays)."""
        if _names(self.source, thread_id):
            return self.model_copy(update={"source": None})
        return self


class ClosedFact(Fact):
    """A version of a fact that a later fact of the same kind replaced, as the fact history keeps it."""

    fact_id: str = ""
    """The current fact it was a version of."""
    valid_until: _Moment = None
    closed_by: _Source = None
    """The turn whose fact replaced it."""

    def stored(self) -> dict[str, JsonValue]:
        """Return the version as the history keeps it: `source` always (null when unknown), `closed_by` when known."""
        value = super().stored()
        value["fact_id"] = self.fact_id
        value["source"] = None if self.source is None else _json(self.source)
        value["valid_from"] = self.valid_from
        value["valid_until"] = self.valid_until
        if self.closed_by is not None:
            value["closed_by"] = _json(self.closed_by)
        return value

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> ClosedFact:
        """Return a stored closed version, validated."""
        return cls.model_validate(dict(stored))

    def without_thread(self, thread_id: ThreadId) -> ClosedFact:
        """Return the version with no source or closer naming `thread_id`."""
        update: dict[str, None] = {}
        if _names(self.source, thread_id):
            update["source"] = None
        if _names(self.closed_by, thread_id):
            update["closed_by"] = None
        return self.model_copy(update=update) if update else self


def _names(source: FactSource | None, thread_id: ThreadId) -> bool:
    return source is not None and source.thread_id == thread_id
