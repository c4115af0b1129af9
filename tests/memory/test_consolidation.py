"""Consolidation replaces restated facts, collapses duplicates and keeps the set under its cap."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

import pytest

from chatbot.memory._consolidation import FactPlan, StoredFact, consolidate
from chatbot.memory.extraction import MAX_FACT_CHARS, FactCandidate, extract_offline

T0 = datetime(2025, 1, 1, tzinfo=UTC)


class FakeFactStore:
    """Apply plans the way the writer does, stamping each write with a later time."""

    def __init__(self) -> None:
        self.facts: dict[str, StoredFact] = {}
        self.clock = itertools.count(1)

    def apply(self, plan: FactPlan) -> None:
        for fact_id in plan.deletes:
            del self.facts[fact_id]
        for fact_id, fact in plan.puts:
            stamp = T0 + timedelta(seconds=next(self.clock))
            self.facts[fact_id] = StoredFact(fact_id, fact.text, fact.category, fact.key, stamp)

    def remember(self, message: str, *, max_facts: int = 50) -> FactPlan:
        plan = consolidate(list(self.facts.values()), extract_offline(message).facts, max_facts=max_facts)
        self.apply(plan)
        return plan


def stored(fact_id: str, text: str, key: str, seconds: int) -> StoredFact:
    return StoredFact(fact_id, text, "note", key, T0 + timedelta(seconds=seconds))


@pytest.mark.parametrize(
    ("first", "second", "value"),
    [
        ("remember that I prefer email", "remember that I prefer phone calls", "I prefer phone calls"),
        ("یادت باشد ترجیح می‌دهم ایمیل بزنید", "یادت باشه ترجیح میدم تلفنی تماس بگیرید", "تلفنی"),
        ("remember that my car is a Peugeot 206", "remember that my car is a Toyota", "Toyota"),
        ("remember that I have a garage", "remember that I don't have a garage", "don't have"),
    ],
)
def test_preference_then_its_reverse_leaves_one_fact_with_the_new_value(first: str, second: str, value: str) -> None:
    store = FakeFactStore()
    store.remember(first)
    (first_id,) = store.facts
    store.remember(second)
    assert list(store.facts) == [first_id]  # replaced in place, same id
    assert value in store.facts[first_id].text


def test_200_distinct_facts_leave_at_most_the_cap() -> None:
    store = FakeFactStore()
    for i in range(200):
        store.remember(f"remember that my number {i} reference is {i * 7}", max_facts=50)
        assert len(store.facts) <= 50
    texts = sorted(f.text for f in store.facts.values())
    assert texts == sorted(f"my number {i} reference is {i * 7}" for i in range(150, 200))  # the newest stay


def test_one_batch_larger_than_the_cap() -> None:
    existing = [stored(f"old{i}", f"old fact {i}", f"k{i}", i) for i in range(10)]
    new = [FactCandidate(f"new fact number {i}", "note", f"n{i}") for i in range(200)]
    plan = consolidate(existing, new, max_facts=50)
    assert sorted(plan.deletes) == sorted(f.id for f in existing)
    assert [f.text for _, f in plan.puts] == [f"new fact number {i}" for i in range(150, 200)]


def test_eviction_takes_the_least_recently_updated() -> None:
    existing = [
        stored("b", "fact b", "kb", 5),
        stored("a", "fact a", "ka", 1),
        stored("c", "fact c", "kc", 9),
    ]
    plan = consolidate(existing, [FactCandidate("fact d", "note", "kd")], max_facts=3)
    assert plan.deletes == ["a"]
    assert len(plan.puts) == 1


def test_refreshing_a_fact_saves_it_from_eviction() -> None:
    existing = [stored("a", "fact a", "ka", 1), stored("b", "fact b", "kb", 2)]
    plan = consolidate(
        existing, [FactCandidate("fact a again", "note", "ka"), FactCandidate("c", "note", "kc")], max_facts=2
    )
    assert plan.deletes == ["b"]
    assert plan.puts[0][0] == "a"


def test_restatement_with_another_key_reuses_the_id() -> None:
    existing = [stored("x", "I live in Shiraz.", "old-extractor-key", 1)]
    plan = consolidate(existing, [FactCandidate("i live in  SHIRAZ", "location", "residence")])
    assert plan.puts == [("x", FactCandidate("i live in  SHIRAZ", "location", "residence"))]
    assert plan.deletes == []


def test_stored_duplicates_of_a_key_collapse_into_the_newest() -> None:
    existing = [
        stored("old", "I prefer email", "preference:contact", 1),
        stored("new", "I prefer sms", "preference:contact", 2),
    ]
    plan = consolidate(existing, [FactCandidate("I prefer calls", "preference", "preference:contact")])
    assert plan.deletes == ["old"]
    assert [fact_id for fact_id, _ in plan.puts] == ["new"]


def test_facts_without_a_key_are_not_merged_by_it() -> None:
    existing = [stored("a", "fact one", "", 1), stored("b", "something else", "", 2)]
    plan = consolidate(existing, [FactCandidate("third thing", "note", "")])
    assert plan.deletes == []
    assert plan.puts[0][0] not in {"a", "b"}


def test_new_ids_are_uuid4_hex_and_one_put_per_id() -> None:
    facts = [
        FactCandidate("I prefer email", "preference", "preference:contact"),
        FactCandidate("I prefer calls", "preference", "preference:contact"),
        FactCandidate("my car is a Kia", "vehicle", "vehicle"),
    ]
    plan = consolidate([], facts)
    assert len(plan.puts) == 2
    assert all(re.fullmatch("[0-9a-f]{32}", fact_id) for fact_id, _ in plan.puts)
    assert plan.puts[0][1].text == "I prefer calls"


def test_every_fact_is_at_most_300_characters() -> None:
    plan = consolidate([], [FactCandidate("x" * 1000, "note", "long")])
    assert len(plan.puts[0][1].text) == MAX_FACT_CHARS


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_facts"):
        consolidate([], [], max_facts=0)
