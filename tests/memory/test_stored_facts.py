"""A fact reads back as it was stored, by every version that wrote one, and a fact of another shape is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import JsonValue, ValidationError

from chatbot.ids import RunId, ThreadId
from chatbot.memory._profile_sources import stored_sources
from chatbot.memory.extraction import stored_profile
from chatbot.memory.facts import ClosedFact, Fact, FactSource

TURN: dict[str, JsonValue] = {"thread_id": "t-1", "run_id": "r-1"}
LATER: dict[str, JsonValue] = {"thread_id": "t-2", "run_id": "r-2"}
# As the writer stored them: before sources were kept, and since.
BEFORE_SOURCES = {"key": "vehicle", "text": "my car is a Peugeot 206", "category": "vehicle"}
CURRENT = {**BEFORE_SOURCES, "source": TURN, "valid_from": "2026-01-01T00:00:00.000000Z"}
UNTIL = "2026-02-01T00:00:00.000000Z"
CLOSED = {
    "fact_id": "f1",
    **BEFORE_SOURCES,
    "source": None,
    "valid_from": "2026-01-01T00:00:00.000000Z",
    "valid_until": UNTIL,
    "closed_by": LATER,
}


@pytest.mark.parametrize("stored", [BEFORE_SOURCES, CURRENT])
def test_a_stored_fact_is_written_back_as_it_was_read(stored: dict[str, object]) -> None:
    assert Fact.from_stored(stored).stored() == stored


def test_a_closed_version_is_written_back_as_it_was_read_and_as_the_writer_closes_a_fact() -> None:
    assert ClosedFact.from_stored(CLOSED).stored() == CLOSED
    closing = FactSource(thread_id=ThreadId("t-2"), run_id=RunId("r-2"))
    closed = Fact.from_stored(BEFORE_SOURCES).closed("f1", datetime(2026, 1, 1, tzinfo=UTC), UNTIL, closing)
    assert closed.stored() == CLOSED


def test_what_a_fact_says_is_read_from_its_stored_form() -> None:
    fact = Fact.from_stored(CURRENT)
    assert (fact.text, fact.category, fact.key) == ("my car is a Peugeot 206", "vehicle", "vehicle")
    assert fact.source == FactSource(thread_id=ThreadId("t-1"), run_id=RunId("r-1"))
    assert Fact.from_stored(BEFORE_SOURCES).source is None
    assert Fact.from_stored({**CURRENT, "source": {"thread_id": "t-1"}}).source is None  # no run: no source
    assert ClosedFact.from_stored(CLOSED).closed_by == FactSource(thread_id=ThreadId("t-2"), run_id=RunId("r-2"))


@pytest.mark.parametrize(
    "stored",
    [
        {**CURRENT, "text": ["not", "a", "statement"]},
        {**CURRENT, "category": 3},
        {**CURRENT, "source": {"thread_id": 1, "run_id": 2}},
    ],
)
def test_a_fact_of_another_shape_is_refused(stored: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Fact.from_stored(stored)


def test_the_profile_and_its_sources_are_validated_as_they_are_read() -> None:
    profile: dict[str, JsonValue] = {"language": "fa", "products": ["travel"], "topics": {"claim": 4}}
    assert stored_profile(profile) == profile
    with pytest.raises(ValidationError):
        stored_profile({"products": "travel"})
    sources: dict[str, JsonValue] = {"language": [TURN], "household": {"children:2": [{**TURN, "fact_id": "f1"}, {}]}}
    assert stored_sources(sources) == sources
    with pytest.raises(ValidationError):
        stored_sources({"household": {"children:2": ["t-1"]}})
