"""Text normalisation shared by retrieval, the PII guard, memory and the offline responder.

Persian text arrives in many spellings of the same thing: Arabic yeh and kaf (ي ك)
instead of Persian ones (ی ک), Persian (U+06F0-06F9) or Arabic-Indic (U+0660-0669)
digits, zero-width joiners and non-joiners, tatweel. These helpers fold them to one form;
this module is the only place that knows the tables, so every feature folds alike.
Python's `\\d` and `int()` accept every Unicode digit, so code that must see ASCII
digits only calls `fold_digits` (or `fold_all_digits`) first and then matches `[0-9]`.

Retrieval stores what `normalize_persian` returns (chunks' index forms): its output must
not change without a re-index (tests/retrieval/test_normalize_stable.py).
"""

from __future__ import annotations

import re
import unicodedata

_DIGITS = {**{0x06F0 + i: ord("0") + i for i in range(10)}, **{0x0660 + i: ord("0") + i for i in range(10)}}
_LETTERS = {ord("ي"): "ی", ord("ى"): "ی", ord("ك"): "ک", ord("ة"): "ه", ord("ۀ"): "ه", ord("أ"): "ا", ord("إ"): "ا"}
# ZWNJ, ZWJ, LRM, RLM, BOM and friends: invisible, and they split or join words arbitrarily.
_ZERO_WIDTH = {cp: None for cp in (0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0xFEFF, 0x2060, 0x0640)}
_ARABIC_DIACRITICS = re.compile("[\u064b-\u065f\u0670]")
# `\d` on str patterns is every Unicode decimal digit (category Nd, as `str.isdecimal`).
_NON_ASCII_DIGIT = re.compile(r"[^\D0-9]")


def fold_digits(text: str) -> str:
    """Return `text` with Persian and Arabic-Indic digits replaced by ASCII digits."""
    return text.translate(_DIGITS)


def fold_all_digits(text: str) -> str:
    """Return `text` with every Unicode decimal digit (Persian, Arabic-Indic, others) as its ASCII twin.

    Wider than `fold_digits`, for the PII guard: a card number typed in any script is
    still a card number. Retrieval keeps `fold_digits`, the fold its stored index used.
    """
    if text.isascii():
        return text
    # A C-level scan that calls back only for the (rare) non-ASCII digits: a per-character
    # Python loop cost 10 ms on the 144,000 characters one 8,000-character message can
    # expand to under NFKC.
    return _NON_ASCII_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group())), text)


def fold_letters(text: str) -> str:
    """Return `text` with Arabic letter forms as their Persian ones (ي ك ة أ ...), one character for one.

    Length-preserving, so a position found in the folded text slices the original.
    """
    return text.translate(_LETTERS)


def strip_zero_width(text: str, *, replacement: str = "") -> str:
    """Remove zero-width characters and tatweel (or replace them with `replacement`)."""
    if replacement:
        return text.translate({cp: replacement for cp in _ZERO_WIDTH})
    return text.translate(_ZERO_WIDTH)


def normalize_persian(text: str) -> str:
    """Fold Arabic letter forms, digits, diacritics and zero-width characters to one spelling.

    The zero-width non-joiner becomes nothing, so "می‌خواهم" and "میخواهم" meet;
    callers that need word boundaries there tokenise after this.
    """
    text = fold_letters(fold_digits(text))
    text = _ARABIC_DIACRITICS.sub("", text)
    return strip_zero_width(text)


_PERSIAN_LETTERS = re.compile("[\u0600-\u06ff]")


def looks_persian(text: str) -> bool:
    """Return True when the text is written mostly in Arabic script."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return False
    persian = sum(1 for c in letters if _PERSIAN_LETTERS.match(c))
    return persian * 2 >= len(letters)


def cut_at_word(
    text: str,
    limit: int,
    *,
    min_keep: int,
    marker: str = "",
    strip: str | None = None,
    space_after_counts: bool = False,
) -> str:
    """Return the first `limit` characters of `text`, ended at a word boundary when one is near, plus `marker`.

    The cut goes back to the last space, if keeping the text before it keeps at least
    `min_keep` characters; otherwise the last word is split. `space_after_counts`: a space
    right after the limit is a boundary too (the last word fits whole). The kept text loses
    trailing `strip` characters (whitespace by default). With a marker, a cut that keeps
    nothing visible is the marker alone. Text within the limit comes back unchanged.
    """
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit + 1 if space_after_counts else limit)
    head = (text[:space] if space >= min_keep else text[:limit]).rstrip(strip)
    if not marker:
        return head
    return head + marker if head.strip() else marker.strip()
