"""Search normalisation is a stored format: chunks and terms indexed yesterday must meet today's queries."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.normalize_golden.make_fixture import EXPECTED, normalised

CASES = json.loads(EXPECTED.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_normalisation_matches_what_was_indexed(case: dict[str, str]) -> None:
    # expected.json was written by the code that indexed the stored chunks (before the
    # foldings moved into chatbot.text); any difference would leave them unfindable.
    assert normalised(case["text"]) == {k: v for k, v in case.items() if k != "text"}


def test_the_samples_exercise_every_folding() -> None:
    # The samples must change under each folding, or the comparison above proves nothing.
    changed = [c for c in CASES if c["search_form"] != c["text"].casefold()]
    assert len(changed) >= 8
    assert any("ي" in c["text"] for c in changed) and any("٣" in c["text"] for c in changed)
    assert any("\u200c" in c["text"] for c in changed) and any("\u0640" in c["text"] for c in changed)
