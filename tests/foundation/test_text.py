"""The shared text helpers: one cut and one set of foldings for every feature."""

from __future__ import annotations

from chatbot.text import cut_at_word, fold_all_digits, fold_digits, fold_letters, normalize_persian


def test_text_within_the_limit_comes_back_unchanged() -> None:
    assert cut_at_word("short text ", 11, min_keep=1, marker="…") == "short text "


def test_a_cut_ends_at_the_last_word_boundary_it_may_reach() -> None:
    text = "بیمه بدنه خودرو سواری"
    assert cut_at_word(text, 12, min_keep=5, marker="…") == "بیمه بدنه…"
    # Too far back: the word is split instead of losing most of the text.
    assert cut_at_word(text, 12, min_keep=10, marker="…") == "بیمه بدنه خو…"


def test_a_space_right_after_the_limit_keeps_the_last_word_whole_when_asked() -> None:
    assert cut_at_word("one two three", 7, min_keep=1) == "one"
    assert cut_at_word("one two three", 7, min_keep=1, space_after_counts=True) == "one two"


def test_trailing_characters_go_and_an_empty_cut_is_the_marker_alone() -> None:
    assert cut_at_word("hello, world", 6, min_keep=10, strip=" ,") == "hello"
    assert cut_at_word("          x", 5, min_keep=1, marker=" [cut]") == "[cut]"


def test_letter_folding_keeps_every_position() -> None:
    text = "مي‌خواهم كارت بيمه‌ام را"
    assert len(fold_letters(text)) == len(text)
    assert fold_letters(text) == "می‌خواهم کارت بیمه‌ام را"


def test_digit_foldings_differ_only_in_reach() -> None:
    assert fold_digits("۱۲٣") == fold_all_digits("۱۲٣") == "123"
    devanagari = "\u0967\u0968"  # the PII guard folds every script; retrieval's stored fold does not
    assert fold_all_digits(devanagari) == "12"
    assert fold_digits(devanagari) == devanagari
    assert normalize_persian("۱۲") == "12"
