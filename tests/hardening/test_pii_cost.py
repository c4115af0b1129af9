"""The PII guard's IBAN scan is linear now; it must still find exactly what the old scan found."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hypothesis import example, given, settings
from hypothesis import strategies as st

from chatbot.memory._pii_numbers import _iban_candidates
from chatbot.memory.extraction import extract_offline
from chatbot.memory.pii import PiiCategory, find_pii

# The scan before the fix: one regex that backtracks through every way of cutting a long
# word into 1-4 character groups. Kept here as the reference the linear scan must equal.
_OLD_GENERIC_IBAN = re.compile(r"(?<![a-z0-9])[a-z]{2}[0-9]{2}(?:[ \-]?[a-z0-9]{1,4}){3,8}(?![a-z0-9])")


def _old_candidates(norm: str) -> Iterator[str]:
    for match in _OLD_GENERIC_IBAN.finditer(norm):
        parts = re.split(r"[ \-]", match.group())
        for n in range(len(parts), 0, -1):
            compact = "".join(parts[:n])
            if 15 <= len(compact) <= 34:
                yield compact


# Words shaped like IBAN groups, so that the interesting cases (starts, group counts at the
# 8-group limit, words too long to be a group run) come up often.
_WORD = st.one_of(
    st.from_regex(r"[a-z]{2}[0-9]{2}[a-z0-9]{0,12}", fullmatch=True),
    st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True),
    st.sampled_from(["de89", "ir12", "gb29", "nwbk", "6016", "1331", "9268", "19", "x"]),
)
_GAP = st.sampled_from([" ", "-", "  ", " - ", ", ", "--", "."])


@st.composite
def _texts(draw: st.DrawFn) -> str:
    words = draw(st.lists(_WORD, min_size=1, max_size=14))
    gaps = draw(st.lists(_GAP, min_size=len(words), max_size=len(words)))
    return "".join(w + g for w, g in zip(words, gaps, strict=True)).strip()


@settings(max_examples=400, deadline=None, database=None)
@given(_texts())
@example("de89 3704 0044 0532 0130 00")
@example("de89-3704-0044-0532-0130-00 and more")
@example("ab12 cccc cccc cccc cccc cccc cccc cccc cccc c")
@example("ab12" + "c" * 33)
@example("gb29 nwbk 6016 1331 9268 19 x ab12 1 2 3")
def test_the_linear_scan_yields_every_old_candidate(text: str) -> None:
    # A superset: the new scan also starts inside a run, where the old one never looked.
    new = set(_iban_candidates(text))
    assert set(_old_candidates(text)) <= new


def test_real_ibans_are_still_refused_in_any_grouping() -> None:
    for written in ["DE89 3704 0044 0532 0130 00", "de89370400440532013000", "GB29-NWBK-6016-1331-9268-19"]:
        assert find_pii(f"remember that my account is {written} please") == [PiiCategory.IBAN]


def test_an_iban_shaped_word_just_before_an_iban_does_not_hide_it() -> None:
    # The old scan took "ab12 DE89 ..." as one run starting at "ab12" and never looked at "DE89".
    assert find_pii("remember that ab12 DE89 3704 0044 0532 0130 00") == [PiiCategory.IBAN]
    assert _OLD_GENERIC_IBAN.search("ab12 de89 3704 0044 0532 0130 00").start() == 0  # type: ignore[union-attr]


def test_an_adversarial_message_is_judged_the_same_and_its_statement_refused_or_kept() -> None:
    # The finding: 8,000 characters of IBAN-like words. None is a valid IBAN, so the
    # statement is kept; with one real IBAN among them it is refused.
    words = " ".join(["ab12" + "c" * 33] * 210)
    benign = ("remember that " + words)[:8000]
    assert find_pii(benign) == []
    assert len(extract_offline(benign, locale="en-US").facts) == 1
    with_iban = ("remember that " + words[:7000] + " DE89 3704 0044 0532 0130 00")[:8000]
    assert find_pii(with_iban) == [PiiCategory.IBAN]
    assert extract_offline(with_iban, locale="en-US").rejected == [PiiCategory.IBAN]
