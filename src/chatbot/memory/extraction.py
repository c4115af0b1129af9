"""Extract memory candidates from a user's message with deterministic rules (the offline extractor).

No network, no model: the language used, a formality guess from cues, the products named
(from the tenant's vocabulary), household facts the user volunteered, recurring topics,
and facts the user explicitly asked to be remembered ("remember that …", "یادت باشد …").
Facts are checked by the PII guard on the whole statement before it is cut to 300
characters, so a cut can never turn a refused card number into a stored partial one. The
writer still runs the guard again in front of the store write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import JsonValue, TypeAdapter
from typing_extensions import TypedDict

from chatbot.memory._extraction_terms import (
    DEFAULT_PRODUCTS,
    FORMAL_CUES,
    HOUSEHOLD_RULES,
    INFORMAL_CUES,
    MARITAL,
    TOPICS,
    count_word,
)
from chatbot.memory._fact_keys import classify_fact
from chatbot.memory._instructions import InstructionKind, instruction_kind
from chatbot.memory.pii import MAX_CHECKED_CHARS, PiiCategory, checkable_form, normalize_for_pii, rejection_reason
from chatbot.text import cut_at_word, fold_digits, fold_letters, looks_persian

__all__ = [
    "DEFAULT_PRODUCTS",
    "MAX_FACT_CHARS",
    "FactCandidate",
    "MemoryCandidates",
    "Profile",
    "compile_products",
    "cut_fact",
    "extract_offline",
    "merge_profile",
    "stored_profile",
]

MAX_FACT_CHARS = 300
MAX_LIST_ITEMS = 20
MAX_TOPICS = 20
MAX_TOPIC_COUNT = 1000


class Profile(TypedDict, total=False):
    """The user's profile document, and what one message gives it (only the slots it informs)."""

    language: str
    """"fa" or "en": the language the user writes in (a model extractor may propose another code)."""
    formality: str
    """"formal" or "informal"."""
    products: list[str]
    """Product keys of the tenant's vocabulary, newest last."""
    household: list[str]
    """Household entries ("married", "children:2"), newest last."""
    topics: dict[str, int]
    """How often each topic came up."""


_STORED_PROFILE: TypeAdapter[Profile] = TypeAdapter(Profile)


def stored_profile(value: Mapping[str, JsonValue]) -> Profile:
    """Return a stored profile document as a `Profile`, validated (a slot of another shape raises).

    Only `merge_profile`'s result is written under the profile key, so every slot has its
    declared shape.
    """
    return _STORED_PROFILE.validate_python(dict(value))


@dataclass(frozen=True, slots=True)
class FactCandidate:
    """A statement the user asked to be remembered."""

    text: str
    """The statement after the trigger, trimmed, at most 300 characters, as the user wrote it."""
    category: str
    """What kind of fact: preference, vehicle, policy, location, personal or note."""
    key: str
    """What the fact is about; a later fact with the same key replaces this one."""


@dataclass(slots=True)
class MemoryCandidates:
    """What one user message offers to the user's memory."""

    profile_updates: Profile = field(default_factory=lambda: Profile())
    """language, formality, products, household, topics: only the keys this message informs."""
    facts: list[FactCandidate] = field(default_factory=list)
    """Explicit "remember" statements that passed the PII guard."""
    rejected: list[PiiCategory] = field(default_factory=list)
    """One category per statement the PII guard dropped (for the metric; never the value)."""
    instructions: list[InstructionKind] = field(default_factory=list)
    """One kind per statement refused as an instruction rather than a fact (for the metric)."""


_GAP = r"[\s\u200b-\u200f]*"
_TRIGGER = re.compile(
    rf"\b(?P<en>(?:please{_GAP})?(?:remember|don'?t{_GAP}forget|do{_GAP}not{_GAP}forget|keep{_GAP}in{_GAP}mind"
    rf"|(?:make{_GAP}a{_GAP})?note{_GAP}that)(?:{_GAP}(?:that|this))?)\b"
    rf"|(?P<fa>یاد(?:ت|تان|تون){_GAP}(?:باشد|باشه|بمونه|بماند)"
    rf"|ب(?:ه)?{_GAP}(?:خاطر|یاد){_GAP}(?:بسپار(?:ید)?|داشته{_GAP}باش(?:ید)?)"
    rf"|فراموش{_GAP}نکن(?:ید)?|یادداشت{_GAP}کن(?:ید)?)",
    re.IGNORECASE,
)
# English "remember" is also a plain verb ("I don't remember my policy number"): a trigger
# preceded by one of these words is not a request to remember.
_NOT_A_REQUEST = frozenset(
    "i we they he she not to don't dont cannot can't won't didn't doesn't never did do does i'll".split()
)
_PREV_WORD = re.compile(r"([a-z'’]+)\W*$", re.IGNORECASE)
_QUESTION_START = re.compile(r"(?:what|when|where|which|who|whom|whose|why|how|if|whether)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?؟](?=\s|$)|\n")
_PUNCT = r"[\s\u200b-\u200f:：،,;\-–—]*"
_LEAD = re.compile(rf"{_PUNCT}(?:(?:that|که)(?![^\W\d_]))?{_PUNCT}", re.IGNORECASE)
# A joiner word ending the statement, to drop with the separators before it. Matched as
# the word alone, the separators stripped after: the one-regex form
# `[\s,،]+(?:and|…)$` tried every start in a run of commas and backtracked through the run
# from each, 1.3 s for a legal 8,000-character "remember that x,,,,…,y".
_JOINER_WORD = re.compile(r"(?:and|also|so|but|please|plus|و|ضمنا|همچنین|لطفا)$", re.IGNORECASE)
# What `[\s,،]` matches: every character `str.isspace` accepts (all below U+3001), and the commas.
_JOINER_SEPARATORS = "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + ",،"
_TRAIL = " \t\n\u200b\u200c\u200d\u200e\u200f.!،,;:"


def compile_products(products: Mapping[str, Sequence[str]]) -> dict[str, list[re.Pattern[str]]]:
    """Compile a product vocabulary (key -> surface forms) into patterns on normalised text."""
    compiled: dict[str, list[re.Pattern[str]]] = {}
    for key, forms in products.items():
        patterns = []
        for form in forms:
            words = re.split(r"[\s\-]+", normalize_for_pii(form).strip())
            body = r"[\s\-]*".join(re.escape(w) for w in words if w)
            if not body:
                continue
            # Latin forms need a right boundary ("travel" is not "traveller"'s prefix match of
            # interest, "life" is not "lifetime"); Persian forms take suffixes ("ثالثم").
            tail = r"(?:s|es)?(?![a-z])" if words[-1].isascii() else ""
            patterns.append(re.compile(rf"(?<!\w){body}{tail}"))
        compiled[key] = patterns
    return compiled


_DEFAULT_COMPILED = compile_products(DEFAULT_PRODUCTS)


def _is_request(text: str, start: int) -> bool:
    """Tell a "remember" request from the verb used in a statement or a question."""
    match = _PREV_WORD.search(text[max(0, start - 40) : start])
    if not match:
        return True
    prev = match.group(1).lower().replace("’", "'")
    if prev == "you":  # "could you remember …" asks, "do you remember …" does not
        before = _PREV_WORD.search(text[max(0, start - 60) : start - len(match.group(0))])
        return before is not None and before.group(1).lower() in {"could", "can", "would", "will", "please"}
    return prev not in _NOT_A_REQUEST


def cut_fact(statement: str) -> str:
    """Cut a statement to MAX_FACT_CHARS at a word boundary (a last word that ends at the limit stays)."""
    return cut_at_word(
        statement, MAX_FACT_CHARS, min_keep=MAX_FACT_CHARS // 2 + 1, strip=_TRAIL, space_after_counts=True
    )


def _statements(text: str) -> list[str]:
    """Return the statements that follow each remember trigger, as written, untruncated."""
    # Length-preserving folding: trigger positions found on the folded text slice the
    # original, so the stored fact keeps the user's own spelling and digits.
    folded = fold_letters(fold_digits(text))
    triggers = [m for m in _TRIGGER.finditer(folded) if m.group("fa") or _is_request(folded, m.start())]
    statements = []
    for i, trigger in enumerate(triggers):
        limit = triggers[i + 1].start() if i + 1 < len(triggers) else len(text)
        lead = _LEAD.match(folded, trigger.end(), limit)
        begin = lead.end() if lead else trigger.end()
        end_match = _SENTENCE_END.search(folded, begin, limit)
        end = end_match.start() if end_match else limit
        raw = re.sub(r"\s+", " ", text[begin:end]).strip(_TRAIL)
        raw = _drop_joiner_tail(raw).strip(_TRAIL)  # "… in Yazd, and remember …"
        if trigger.group("en") and _QUESTION_START.match(raw):
            continue
        if sum(c.isalnum() for c in raw) >= 2:
            statements.append(raw)
    return statements


def _drop_joiner_tail(raw: str) -> str:
    """Return `raw` without a joiner word that ends it after a separator (", and"), else unchanged."""
    joiner = _JOINER_WORD.search(raw)
    if joiner is None:
        return raw
    head = raw[: joiner.start()]
    kept = head.rstrip(_JOINER_SEPARATORS)
    # `$` also matches before a final newline, which the old `sub` kept.
    return kept + raw[joiner.end() :] if len(kept) < len(head) else raw


def _facts(
    text: str, products: Mapping[str, Sequence[re.Pattern[str]]], *, checkable: bool
) -> tuple[list[FactCandidate], list[PiiCategory], list[InstructionKind]]:
    """Turn remember statements into fact candidates, dropping instructions and what the PII guard refuses.

    A statement that addresses the assistant or orders it about is no fact about the user
    (memory/_instructions.py): it is refused whole, whatever else it says.

    `checkable` is False when the whole message is longer than the guard reads once
    normalised: each statement could fit alone, but together they would make the guard
    read the expansion after all, so every one is refused unchecked.
    """
    facts: list[FactCandidate] = []
    rejected: list[PiiCategory] = []
    instructions: list[InstructionKind] = []
    for statement in _statements(text):
        if not checkable:
            rejected.append(PiiCategory.UNCHECKED)
            continue
        short = cut_fact(statement)
        # What would be stored is the cut: an order beyond it is never stored, and reading
        # only the cut bounds the check's cost per statement (300 characters).
        kind = instruction_kind(short)
        if kind is not None:
            instructions.append(kind)
            continue
        # The guard first, the classification only for what it keeps: an offline category
        # is never health-like, and a refused statement needs no key.
        reason = rejection_reason(statement) or (rejection_reason(short) if short != statement else None)
        if reason is not None:
            rejected.append(reason)
            continue
        category, key = classify_fact(statement, products)
        facts.append(FactCandidate(text=short, category=category, key=key))
    return facts, rejected, instructions


def _language(text: str, locale: str) -> str | None:
    """Return "fa" or "en" for the language the message is written in (the locale breaks ties)."""
    if looks_persian(text):
        return "fa"
    if re.search("[A-Za-z]", text):
        return "en"
    prefix = locale.split("-")[0].lower()
    return prefix if prefix in {"fa", "en"} else None


def _formality(norm: str) -> str | None:
    """Guess formal or informal from cue words; None when the message gives no cue."""
    score = sum(len(p.findall(norm)) for p in FORMAL_CUES) - sum(len(p.findall(norm)) for p in INFORMAL_CUES)
    if score == 0:
        return None
    return "formal" if score > 0 else "informal"


def _household(norm: str) -> list[str]:
    """Return household facts the message volunteers (marital status, children)."""
    found: list[str] = []
    for value, pattern in HOUSEHOLD_RULES:
        match = pattern.search(norm)
        if not match:
            continue
        if value in MARITAL and any(v in MARITAL for v in found):
            continue  # the first (most specific) marital rule wins
        if value == "children" and "count" in (match.groupdict() or {}):
            n = count_word(match.group("count"))
            value = f"children:{n}" if n else "children"
        if not any(v.split(":")[0] == value.split(":")[0] for v in found):
            found.append(value)
    return found


def extract_offline(
    text: str,
    *,
    locale: str = "fa-IR",
    status: str = "answered",
    products: Mapping[str, Sequence[str]] | None = None,
) -> MemoryCandidates:
    """Extract profile updates and remember-facts from one user message (answered turns only)."""
    if status != "answered" or not text.strip():
        return MemoryCandidates()
    compiled = _DEFAULT_COMPILED if products is None else compile_products(products)
    # Normalised no further than the guard reads: a message the guard would not read whole
    # has its statements refused unread, and the profile's cues come from its first
    # MAX_CHECKED_CHARS characters (all of any ordinary message), so the cost per message is
    # bounded however far NFKC expands it.
    whole = checkable_form(text)
    checkable = whole is not None
    norm = whole if whole is not None else normalize_for_pii(text, limit=MAX_CHECKED_CHARS)[:MAX_CHECKED_CHARS]
    norm = re.sub(r"\s+", " ", norm)
    updates = Profile()
    language = _language(text, locale)
    if language:
        updates["language"] = language
    formality = _formality(norm)
    if formality:
        updates["formality"] = formality
    named = [key for key, patterns in compiled.items() if any(p.search(norm) for p in patterns)]
    if named:
        updates["products"] = named
    household = _household(norm)
    if household:
        updates["household"] = household
    topics = {name: 1 for name, pattern in TOPICS if pattern.search(norm)}
    if topics:
        updates["topics"] = topics
    facts, rejected, instructions = _facts(text, compiled, checkable=checkable)
    return MemoryCandidates(profile_updates=updates, facts=facts, rejected=rejected, instructions=instructions)


def _merge_list(old: Sequence[str], new: Sequence[str], *, household: bool) -> list[str]:
    """Append new items (newest last), dedupe, replace same-group household items, keep the newest."""
    merged = [str(v) for v in old]
    for value in new:
        group = "marital" if value in MARITAL else value.split(":")[0]
        if household:
            if value == "children" and any(v.startswith("children:") for v in merged):
                continue  # an exact count already known beats "has children"
            merged = [v for v in merged if ("marital" if v in MARITAL else v.split(":")[0]) != group]
        else:
            merged = [v for v in merged if v != value]
        merged.append(value)
    return merged[-MAX_LIST_ITEMS:]


def merge_profile(old: Profile, updates: Profile) -> Profile:
    """Return `old` updated by `updates`: scalars replaced, lists deduped and bounded, topics counted.

    The profile is one document updated in place, not a log: the newest value of a scalar
    wins, lists keep their newest MAX_LIST_ITEMS entries, topic counts stop at
    MAX_TOPIC_COUNT and only the MAX_TOPICS most frequent topics stay. Neither input is mutated.
    """
    merged = old.copy()
    # In the update's order: a slot new to the document is stored (and shown to the model)
    # where the extractor named it, as it always was.
    for name in updates:
        if name == "products":
            merged["products"] = _merge_list(old.get("products") or [], list(updates["products"]), household=False)
        elif name == "household":
            merged["household"] = _merge_list(old.get("household") or [], list(updates["household"]), household=True)
        elif name == "topics":
            merged["topics"] = _count_topics(old.get("topics") or {}, updates["topics"])
        elif name == "language" and updates["language"] is not None:
            merged["language"] = updates["language"]
        elif name == "formality" and updates["formality"] is not None:
            merged["formality"] = updates["formality"]
    return merged


def _count_topics(old: Mapping[str, int], new: Mapping[str, int]) -> dict[str, int]:
    """Return the topic counts with `new` added: each bounded, the MAX_TOPICS most frequent kept."""
    counts = {str(k): int(v) for k, v in old.items()}
    for topic, n in new.items():
        counts[topic] = min(MAX_TOPIC_COUNT, counts.get(topic, 0) + int(n))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_TOPICS])
