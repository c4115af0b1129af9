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
from typing import Literal

from pydantic import JsonValue, TypeAdapter
from typing_extensions import TypedDict

from chatbot.ids import ThreadId
from chatbot.memory.extraction import FactCandidate, Profile, extract_offline

Scalar = Literal["language", "formality"]
Collection = Literal["products", "household", "topics"]
Source = dict[str, str]
"""A turn that gave an entry: `thread_id`, `run_id`, and `fact_id` when a fact's words gave it."""

MAX_SOURCES = 5
_SCALARS: tuple[Scalar, ...] = ("language", "formality")
_COLLECTIONS: tuple[Collection, ...] = ("products", "household", "topics")
# What a fact's own words can give: the subject of the statement, not how it was written.
_FROM_FACTS: tuple[Collection, ...] = ("products", "household")


class ProfileSources(TypedDict, total=False):
    """The sources item: for each profile entry, the newest MAX_SOURCES turns that gave it."""

    language: list[Source]
    formality: list[Source]
    products: dict[str, list[Source]]
    household: dict[str, list[Source]]
    topics: dict[str, list[Source]]


_STORED_SOURCES: TypeAdapter[ProfileSources] = TypeAdapter(ProfileSources)


def stored_sources(value: Mapping[str, JsonValue]) -> ProfileSources:
    """Return a stored sources item as `ProfileSources`, validated (only `record`, `forget` and
    `without_thread` write it, so an entry of another shape raises)."""
    return _STORED_SOURCES.validate_python(dict(value))


def _entries(profile: Profile, name: Collection) -> list[str]:
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


def _by_entry(sources: ProfileSources, name: Collection) -> Mapping[str, list[Source]]:
    value = sources.get(name)
    return value if isinstance(value, Mapping) else {}


def _add(sources: Sequence[object], source: Source) -> list[Source]:
    kept = [s for s in sources if isinstance(s, dict) and s != source]
    return [*kept, source][-MAX_SOURCES:]


def record(
    old: ProfileSources,
    updates: Profile,
    facts: Sequence[tuple[str, FactCandidate]],
    turn: Source,
    profile: Profile,
) -> ProfileSources:
    """Return the sources after a turn's `updates` merged into `profile` (the merged profile).

    `facts` are the turn's written facts with their ids: an entry one of them gives is
    sourced to that fact, any other to the turn alone. Sources of entries the merge dropped go.
    """
    given = [(fact_id, _given_by(fact)) for fact_id, fact in facts]
    sources = ProfileSources()
    for scalar in _SCALARS:
        kept: list[Source] = list(old.get(scalar) or [])
        if updates.get(scalar) is not None:
            kept = _add(kept, turn)
        if profile.get(scalar) is not None and kept:
            sources[scalar] = kept
    for collection in _COLLECTIONS:
        previous = _by_entry(old, collection)
        present = set(_entries(profile, collection))
        entries = {k: list(v) for k, v in previous.items() if k in present}
        for entry in _entries(updates, collection):
            from_facts: list[str | None] = [fact_id for fact_id, cues in given if entry in cues.get(collection, set())]
            for fact_id in from_facts or [None]:
                source = turn if fact_id is None else {**turn, "fact_id": fact_id}
                entries[entry] = _add(entries.get(entry, []), source)
        if entries:
            sources[collection] = entries
    return sources


def forget(profile: Profile, sources: ProfileSources, fact_id: str) -> tuple[Profile, ProfileSources]:
    """Return the profile and sources without what came only from the fact `fact_id`.

    An entry whose sources all named the fact goes from the profile; an entry with another
    source stays. Entries without recorded sources (written before sources were kept) stay.
    """
    new_profile = profile.copy()
    new_sources = ProfileSources()
    for scalar in _SCALARS:
        listed = [s for s in sources.get(scalar) or [] if isinstance(s, dict)]
        left = [s for s in listed if s.get("fact_id") != fact_id]
        if listed and not left:
            new_profile.pop(scalar, None)
        elif left:
            new_sources[scalar] = left
    for collection in _COLLECTIONS:
        by_entry = _by_entry(sources, collection)
        gone: set[str] = set()
        kept: dict[str, list[Source]] = {}
        for entry, listed in by_entry.items():
            left = [s for s in listed if isinstance(s, dict) and s.get("fact_id") != fact_id]
            if left:
                kept[entry] = left
            else:
                gone.add(entry)
        if kept:
            new_sources[collection] = kept
        if gone and collection in new_profile:
            _drop_entries(new_profile, collection, gone)
    return new_profile, new_sources


def _drop_entries(profile: Profile, name: Collection, gone: set[str]) -> None:
    """Remove the `gone` entries from the profile's collection `name`, and the collection when it is left empty."""
    if name == "topics":
        topics = {k: v for k, v in profile.get("topics", {}).items() if k not in gone}
        if topics:
            profile["topics"] = topics
        else:
            del profile["topics"]
        return
    left = [v for v in profile.get(name, []) if v not in gone]
    if left:
        profile[name] = left
    else:
        del profile[name]


def without_thread(sources: ProfileSources, thread_id: ThreadId) -> ProfileSources:
    """Return the sources with every turn of `thread_id` kept unnamed (the thread was deleted).

    The entry a turn gave stays (memory is the user's), so its source stays too, without the
    thread and run that named it: a fact's id, when a fact gave it, is kept.
    """
    kept = ProfileSources()
    for scalar in _SCALARS:
        if scalar in sources:
            kept[scalar] = _unnamed(sources[scalar], thread_id)
    for collection in _COLLECTIONS:
        if collection in sources:
            kept[collection] = {entry: _unnamed(listed, thread_id) for entry, listed in sources[collection].items()}
    return kept


def _unnamed(sources: list[Source], thread_id: ThreadId) -> list[Source]:
    return [
        {k: v for k, v in s.items() if k not in ("thread_id", "run_id")} if s.get("thread_id") == thread_id else s
        for s in sources
    ]
