"""Plan how new facts change a user's stored facts: replace, refresh, add, evict.

A new fact that restates or contradicts a stored one takes over its id (same key, or same
normalised text, or nearly the same content words), so the store never holds two current
versions of one thing; when its text differs, the stored version is closed (`FactPlan.closes`:
the writer keeps it in the user's fact history, valid until now). Several stored facts
sharing a key (left by an older extractor) collapse into the most recent one. When the set
outgrows the cap, the least recently updated facts go. The plan is pure: the caller applies
it under the per-user writer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from uuid import uuid4

from chatbot.memory._fact_keys import content_words
from chatbot.memory.extraction import MAX_FACT_CHARS, FactCandidate, cut_fact
from chatbot.memory.pii import normalize_for_pii

# Two statements whose content words overlap this much say the same thing in other words
# ("I live in Shiraz" / "I live in Shiraz now"); below it they are distinct facts.
RESTATEMENT_JACCARD = 0.8


@dataclass(frozen=True, slots=True)
class StoredFact:
    """A fact as the store holds it."""

    id: str
    text: str
    category: str
    key: str
    updated_at: datetime
    """When the fact was last written; all facts of one user must agree on tz-awareness."""


@dataclass(slots=True)
class FactPlan:
    """Store operations that bring a user's facts up to date."""

    puts: list[tuple[str, FactCandidate]] = field(default_factory=list)
    """(fact id, fact) to write, in order; an existing id means replace."""
    deletes: list[str] = field(default_factory=list)
    """Ids of stored facts to delete (duplicates of a replaced fact, or evicted over the cap)."""
    closes: list[str] = field(default_factory=list)
    """Ids of stored facts whose text a put replaces with another (a changed fact): the stored
    version is closed (kept in the history, valid until now), the put is the current one."""


@dataclass(slots=True)
class _Slot:
    """One fact id in the working set, with what consolidation compares it by."""

    id: str
    key: str
    text: str
    words: frozenset[str]
    rank: int  # recency: higher is newer; new facts rank above every stored one


def _norm_text(text: str) -> str:
    """Return text in the form restatements are compared in."""
    return " ".join(normalize_for_pii(text).split()).strip(" .!؟?،,")


def _restates(slot: _Slot, text: str, words: frozenset[str]) -> bool:
    """Tell whether a new statement says what a stored one says."""
    if slot.text == text:
        return True
    if not slot.words or not words:
        return False
    return len(slot.words & words) / len(slot.words | words) >= RESTATEMENT_JACCARD


def _clip(fact: FactCandidate) -> FactCandidate:
    """Hold a fact to MAX_FACT_CHARS whatever produced it, cut as the offline rules cut."""
    if len(fact.text) <= MAX_FACT_CHARS:
        return fact
    return replace(fact, text=cut_fact(fact.text))


def consolidate(
    existing: Sequence[StoredFact],
    new: Sequence[FactCandidate],
    *,
    max_facts: int = 50,
    new_id: Callable[[], str] = lambda: uuid4().hex,
) -> FactPlan:
    """Plan the puts and deletes that merge `new` facts into `existing` within `max_facts`."""
    if max_facts < 1:
        raise ValueError("max_facts must be at least 1")
    ordered = sorted(existing, key=lambda f: f.updated_at)
    slots: dict[str, _Slot] = {}
    deletes: list[str] = []
    by_key: dict[str, str] = {}
    for rank, stored in enumerate(ordered):
        older = by_key.get(stored.key) if stored.key else None
        if older is not None:  # an older duplicate of this key: the newer one survives
            deletes.append(older)
            del slots[older]
        if stored.key:
            by_key[stored.key] = stored.id
        text, words = _norm_text(stored.text), content_words(stored.text)
        slots[stored.id] = _Slot(stored.id, stored.key, text, words, rank)

    puts: dict[str, FactCandidate] = {}
    stored_texts = {slot.id: slot.text for slot in slots.values()}
    closes: list[str] = []
    rank = len(ordered)
    for candidate in new:
        fact = _clip(candidate)
        text, words = _norm_text(fact.text), content_words(fact.text)
        if not text:
            continue
        fact_id = by_key.get(fact.key) if fact.key else None
        if fact_id is None:
            fact_id = next((s.id for s in slots.values() if _restates(s, text, words)), None)
        if fact_id is None:
            fact_id = new_id()
        else:
            if fact_id in stored_texts and stored_texts[fact_id] != text and fact_id not in closes:
                closes.append(fact_id)  # "I drive a Peugeot" becomes "I drive a motorcycle"
            old_key = slots[fact_id].key
            if by_key.get(old_key) == fact_id:
                del by_key[old_key]
        if fact.key:
            by_key[fact.key] = fact_id
        slots[fact_id] = _Slot(fact_id, fact.key, text, words, rank)
        puts.pop(fact_id, None)  # re-insert so the plan writes facts in the order they were stated
        puts[fact_id] = fact
        rank += 1

    stored_ids = {f.id for f in existing}
    for slot in sorted(slots.values(), key=lambda s: s.rank)[: max(0, len(slots) - max_facts)]:
        if slot.id in puts:
            del puts[slot.id]  # a fact of this very batch squeezed out before it was ever written
        if slot.id in stored_ids:
            deletes.append(slot.id)
    kept_puts = list(puts.items())
    written = {fact_id for fact_id, _ in kept_puts}
    return FactPlan(puts=kept_puts, deletes=deletes, closes=[c for c in closes if c in written])
