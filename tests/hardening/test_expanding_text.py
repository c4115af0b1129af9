"""Legal messages that cost the most text work: the work stays bounded and the answers stay right.

The finding: U+FDFA is one character that NFKC makes 18, so an 8,000-character message
became 144,000 characters for the memory extraction and the PII guard, on the event loop
(0.97 s of CPU; eight at once delayed another tenant's first token by seconds). Now the
guard reads at most MAX_CHECKED_CHARS normalised characters per text and per message and
refuses (UNCHECKED) what it cannot read; the number scan builds only the windows a rule
can use; and two regexes that were quadratic on a legal message are linear. The CPU
figures are in bench/worst_case_text.py and docs/measurements/reliability.md; these tests hold the
behaviour, not the time.
"""

from __future__ import annotations

import itertools
import random
import re
import unicodedata
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatbot.memory import _pii_numbers, extraction, pii
from chatbot.memory.extraction import MAX_FACT_CHARS, extract_offline
from chatbot.memory.pii import MAX_CHECKED_CHARS, PiiCategory, find_pii, normalize_for_pii
from chatbot.models.offline import wants_human
from chatbot.text import fold_all_digits

LIMIT = 8000  # the longest message the API takes
TRIGGER = "remember that "
CARD = "4111 1111 1111 1111"  # passes Luhn


GUARD = ("number_categories", "_has_health")  # the guard's patterns
PROFILE = ("_formality", "_household")  # the profile's cues


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record (function, length) for every normalised text the guard's and the profile's patterns read."""
    seen: list[tuple[str, int]] = []

    def spy(module: object, name: str) -> None:
        real = getattr(module, name)

        def wrapped(norm: str, *args: object) -> object:
            seen.append((name, len(norm)))
            return real(norm, *args)

        monkeypatch.setattr(module, name, wrapped)

    for name in GUARD:
        spy(pii, name)
    for name in PROFILE:
        spy(extraction, name)
    return seen


def _expanders(minimum: int) -> list[str]:
    """Return the characters NFKC turns into at least `minimum` characters, most first."""
    found = [
        chr(cp)
        for cp in range(0x110000)
        if not 0xD800 <= cp <= 0xDFFF and len(unicodedata.normalize("NFKC", chr(cp))) >= minimum
    ]
    return sorted(found, key=lambda c: -len(unicodedata.normalize("NFKC", c)))


def test_the_worst_expanding_character_is_the_one_the_bench_and_these_tests_use() -> None:
    # The cap bounds the work whatever the ratio; this keeps the worst case measured the worst.
    worst = _expanders(6)
    assert worst[0] == "\ufdfa" and len(unicodedata.normalize("NFKC", "\ufdfa")) == 18


@pytest.mark.parametrize("char", ["\ufdfa", "\ufdfb", "\u33af", "\u3316", "\u2475", "\u2488", "\u2026", "\ufb01"])
def test_a_message_of_expanding_characters_is_refused_unchecked_and_nothing_reads_the_expansion(
    char: str, reads: list[tuple[str, int]]
) -> None:
    head = TRIGGER + "my note: "  # letters, so that symbols alone (㎯, …) still make a statement
    message = head + char * (LIMIT - len(head))
    assert len(unicodedata.normalize("NFKC", message)) > MAX_CHECKED_CHARS
    candidates = extract_offline(message, locale="en-US")
    # Nothing of a statement the guard cannot read is stored, and the guard did not run on it.
    assert candidates.facts == [] and candidates.rejected == [PiiCategory.UNCHECKED]
    assert find_pii(message) == [PiiCategory.UNCHECKED]
    assert [name for name, _ in reads] == list(PROFILE)  # the profile's cues, once, and no guard
    assert max(length for _, length in reads) <= MAX_CHECKED_CHARS
    assert candidates.profile_updates["language"] == "en"  # read from the start of the message


def test_statements_that_fit_alone_but_not_together_are_all_refused(reads: list[tuple[str, int]]) -> None:
    # Each statement expands to 9,000 characters (under the cap), the message to far more:
    # checking each would let the guard read the whole expansion after all.
    statement = "\ufdfa" * 500
    message = " ".join([f"{TRIGGER}{statement}."] * 15)
    assert len(message) <= LIMIT
    assert len(normalize_for_pii(statement)) < MAX_CHECKED_CHARS < len(normalize_for_pii(message))
    candidates = extract_offline(message, locale="en-US")
    assert candidates.facts == []
    assert candidates.rejected == [PiiCategory.UNCHECKED] * 15
    assert [name for name, _ in reads] == list(PROFILE)


def test_a_message_within_the_cap_is_guarded_statement_by_statement(reads: list[tuple[str, int]]) -> None:
    message = f"{TRIGGER}I drive a white Pride. {TRIGGER}my card is {CARD}."
    candidates = extract_offline(message, locale="en-US")
    assert [f.text for f in candidates.facts] == ["I drive a white Pride"]
    assert candidates.rejected == [PiiCategory.CARD_NUMBER]
    assert sorted({name for name, _ in reads}) == sorted(GUARD + PROFILE)


def test_the_guard_still_finds_pii_at_the_end_of_the_longest_text_it_reads() -> None:
    # An ellipsis is three characters under NFKC: the text reaches the cap exactly.
    filler = "\u2026" * ((MAX_CHECKED_CHARS - len(CARD) - 1) // 3)
    at_cap = filler + " " + CARD
    assert len(normalize_for_pii(at_cap)) <= MAX_CHECKED_CHARS
    assert find_pii(at_cap) == [PiiCategory.CARD_NUMBER]
    assert find_pii("\u2026" + at_cap) == [PiiCategory.UNCHECKED]  # one character more: unread, refused
    assert find_pii("\u2026" + filler) == []  # and without the card, read and kept


def test_an_ordinary_long_message_is_read_whole_and_kept() -> None:
    # Ordinary text keeps about its length under NFKC: 8,000 characters with ellipses and
    # ligatures stay under the cap, so the statement is kept (cut), and a card number at its
    # very end is still found.
    words = "my car is a white peugeot 206\u2026 parked in the \ufb01eld near tehran, "
    message = (TRIGGER + words * 200)[:LIMIT]
    assert len(normalize_for_pii(message)) <= MAX_CHECKED_CHARS
    candidates = extract_offline(message, locale="en-US")
    assert len(candidates.facts) == 1 and len(candidates.facts[0].text) <= MAX_FACT_CHARS
    with_card = message[: LIMIT - len(CARD) - 1] + " " + CARD
    refused = extract_offline(with_card, locale="en-US")
    assert refused.facts == [] and refused.rejected == [PiiCategory.CARD_NUMBER]


def test_digit_soup_up_to_the_cap_is_read_to_its_end() -> None:
    # The costliest text per character is digits and dots ("⒈" is "1." under NFKC). Up to the
    # cap every window is still checked: a card after 9,800 characters of them is found.
    soup = TRIGGER + "\u2488" * 4900
    message = soup + " and " + CARD  # a word between: any separators join digit groups
    assert len(message) <= LIMIT and len(normalize_for_pii(message)) <= MAX_CHECKED_CHARS
    assert find_pii(soup) == []
    assert find_pii(message) == [PiiCategory.CARD_NUMBER]
    assert extract_offline(message, locale="en-US").rejected == [PiiCategory.CARD_NUMBER]


# --- The number scan: only the windows a rule can use, the same findings as before. ---


def _old_windows(run: str, offset: int) -> Iterator[tuple[str, int]]:
    """The scan before the fix: every window of every interesting length, one group at a time.

    Any separators join groups (memory/_pii_numbers.py reads mixed separators as one number).
    """
    lengths = frozenset({8, 9, 10, 15, 16, 17, 18, 19, 24})
    matches = list(_pii_numbers._GROUP.finditer(run))
    digits = "".join(m.group() for m in matches)
    ends = list(itertools.accumulate(m.end() - m.start() for m in matches))
    for i, first in enumerate(matches):
        begin = ends[i - 1] if i else 0
        for j in range(i, len(matches)):
            if ends[j] - begin > 24:
                break
            if ends[j] - begin in lengths:
                yield digits[begin : ends[j]], offset + first.start()


_SEPARATORS = st.sampled_from([" ", "-", ".", "/", "  ", " - ", "\u2013"])
_GROUPS = st.lists(st.tuples(st.from_regex(r"[0-9]{1,9}", fullmatch=True), _SEPARATORS), min_size=1, max_size=24)


@settings(max_examples=300, deadline=None, database=None)
@given(_GROUPS)
def test_the_bisecting_window_scan_yields_what_the_old_scan_did(groups: list[tuple[str, str]]) -> None:
    run = "".join(digits + sep for digits, sep in groups)[: -len(groups[-1][1])]
    every = frozenset({8, 9, 10, 15, 16, 17, 18, 19, 24})
    assert sorted(_pii_numbers._windows(run, 3, lambda _: every)) == sorted(_old_windows(run, 3))


@pytest.mark.parametrize("label", [None, "", "nid", "card", "iban", "other"])
def test_every_length_a_rule_can_accept_is_scanned_for_its_label(label: str | None) -> None:
    # Windows of the lengths left out for a label must be ones no rule accepts after it.
    rng = random.Random(label or "none")
    scanned = _pii_numbers._LENGTHS_BY_LABEL.get(label, _pii_numbers._UNLABELLED_LENGTHS)
    for length in range(1, 25):
        if length in scanned:
            continue
        for _ in range(300):
            digits = "".join(rng.choice("0123456789") for _ in range(length))
            assert not _pii_numbers._is_national_id(digits, label)
            assert not _pii_numbers._is_card(digits, label)
            assert not _pii_numbers._is_bare_sheba(digits, label)


# --- The two regexes that were quadratic on a legal message. ---


def test_a_statement_full_of_commas_is_kept_and_a_joiner_at_its_end_still_dropped() -> None:
    # `[\s,،]+(?:and|…)$` backtracked through the run of commas from every comma: 1.3 s.
    message = TRIGGER + "x" + "," * (LIMIT - len(TRIGGER) - 2) + "y"
    facts = extract_offline(message, locale="en-US").facts
    assert [f.text for f in facts] == ["x"]  # cut to 300 characters, trailing commas trimmed
    facts = extract_offline("remember that I live in Yazd, and remember that I drive a Pride", locale="en-US").facts
    assert [f.text for f in facts] == ["I live in Yazd", "I drive a Pride"]


_JOINER_ATOMS = ["and", "ALSO", "so", "but", "please", "plus", "و", "لطفا", " ", ",", "،", "\u00a0", "x", "al", "\n"]


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.sampled_from(_JOINER_ATOMS), max_size=8).map("".join))
def test_dropping_a_joiner_tail_is_what_the_old_regex_did(text: str) -> None:
    old = re.compile(r"[\s,،]+(?:and|also|so|but|please|plus|و|ضمنا|همچنین|لطفا)$", re.IGNORECASE)
    assert extraction._drop_joiner_tail(text) == old.sub("", text)


def test_asking_for_a_person_is_found_on_one_line_and_many_verbs_alone_are_not() -> None:
    # `talk.*person` scanned to the line's end from every "talk": 0.08 s for 8,000 characters.
    assert not wants_human(("talk " * 2000)[:LIMIT])
    assert wants_human(("talk " * 1500) + "to a human")
    assert wants_human("I want a real person please")
    assert not wants_human("I want\na real person")  # as before: verb and person on one line


def test_every_unicode_digit_folds_to_its_ascii_twin() -> None:
    digits = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and chr(cp).isdecimal())
    assert fold_all_digits(digits) == "".join(str(unicodedata.decimal(c)) for c in digits)
    assert fold_all_digits("card ۱۲۳۴ ²") == "card 1234 ²"  # a superscript is no decimal digit
