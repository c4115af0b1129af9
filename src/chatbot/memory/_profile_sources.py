"""Where each profile entry came from, so forgetting a fact forgets what was derived from it.

The profile is one document of typed slots (language, formality, products, household,
topics). Beside it, in the same namespace, the `sources` item names for each entry the
turns that gave it, as facts name theirs: `{"thread_id", "run_id"}`, plus `"fact_id"` when
the entry is what a remembered fact says ("remember that I have two children" gives
`household: children:2` from that fact). Forgetting the fact removes its sources; an entry
left with none goes from the profile, so neither the profile nor the next run's model sees
it. An entry a turn gave outside any fact (a product asked about, the language written in)
keeps that turn as its source and stays.

Shape of the item: `{"language": [src, ...], "formality": [...], "products": {"car_body":
[src, ...]}, "household": {"children:2": [...]}, "topics": {"claim": [...]}}`, each list
the newest MAX_SOURCES sources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chatbot.memory.extraction import FactCandidate, extract_offline

MAX_SOURCES = 5
_SCALARS = ("language", "formality")
_COLLECTIONS = ("products", "household", "topics")
# What a fact's own words can give: the subject of the statement, not how it was written.
_FROM_FACTS = ("products", "household")

Source = dict[str, str]


def _entries(profile: Mapping[str, Any], name: str) -> list[str]:
    value = profile.get(name)
    if isinstance(value, Mapping):
        return [str(k) for k in value]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _given_by(fact: FactCandidate) -> dict[str, set[str]]:
    """Return the profile entries a fact's statement gives on its own."""
    updates = extract_offline(fact.text, locale="en-US").profile_updates
    return {name: {str(v) for v in updates.get(name) or []} for name in _FROM_FACTS}


def _by_entry(sources: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = sources.get(name)
    return value if isinstance(value, Mapping) else {}


def _add(sources: list[Any], source: Source) -> list[Source]:
    kept = [s for s in sources if isinstance(s, dict) and s != source]
    return [*kept, source][-MAX_SOURCES:]


def record(
    old: Mapping[str, Any],
    updates: Mapping[str, Any],
    facts: Sequence[tuple[str, FactCandidate]],
    turn: Source,
    profile: Mapping[str, Any],
) -> dict[str, Any]:
    """Return the sources after a turn's `updates` merged into `profile` (the merged profile).

    `facts` are the turn's written facts with their ids: an entry one of them gives is
    sourced to that fact, any other to the turn alone. Sources of entries the merge dropped go.
    """
    given = [(fact_id, _given_by(fact)) for fact_id, fact in facts]
    sources: dict[str, Any] = {}
    for name in _SCALARS:
        kept = list(old.get(name) or [])
        if updates.get(name) is not None:
            kept = _add(kept, turn)
        if profile.get(name) is not None and kept:
            sources[name] = kept
    for name in _COLLECTIONS:
        previous = _by_entry(old, name)
        present = set(_entries(profile, name))
        entries = {k: list(v) for k, v in previous.items() if k in present}
        for entry in _entries(updates, name):
            from_facts: list[str | None] = [fact_id for fact_id, cues in given if entry in cues.get(name, set())]
            for fact_id in from_facts or [None]:
                source = turn if fact_id is None else {**turn, "fact_id": fact_id}
                entries[entry] = _add(entries.get(entry, []), source)
        if entries:
            sources[name] = entries
    return sources


def forget(
    profile: Mapping[str, Any], sources: Mapping[str, Any], fact_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the profile and sources without what came only from the fact `fact_id`.

    An entry whose sources all named the fact goes from the profile; an entry with another
    source stays. Entries without recorded sources (written before sources were kept) stay.
    """
    new_profile = dict(profile)
    new_sources: dict[str, Any] = {}
    for name in _SCALARS:
        listed = [s for s in sources.get(name) or [] if isinstance(s, dict)]
        left = [s for s in listed if s.get("fact_id") != fact_id]
        if listed and not left:
            new_profile.pop(name, None)
        elif left:
            new_sources[name] = left
    for name in _COLLECTIONS:
        by_entry = _by_entry(sources, name)
        gone: set[str] = set()
        kept: dict[str, Any] = {}
        for entry, listed in by_entry.items():
            left = [s for s in listed if isinstance(s, dict) and s.get("fact_id") != fact_id]
            if left:
                kept[entry] = left
            else:
                gone.add(entry)
        if kept:
            new_sources[name] = kept
        if gone and name in new_profile:
            value = new_profile[name]
            if isinstance(value, Mapping):
                new_profile[name] = {k: v for k, v in value.items() if str(k) not in gone}
            elif isinstance(value, list):
                new_profile[name] = [v for v in value if str(v) not in gone]
            if not new_profile[name]:
                del new_profile[name]
    return new_profile, new_sources
