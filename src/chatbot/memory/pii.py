"""Refuse memory candidates that carry personal data the store must never hold.

The guard runs in front of every store write. It recognises Iranian national IDs (کد ملی),
bank card numbers, Sheba/IBAN numbers, payment secrets (CVV2, PIN, passwords, one-time
codes, card expiry) and health information, in Persian and English. It answers with
categories only: the matched value is never returned, logged or put in an exception,
because the guard's own output ends up in metrics and logs.

Its parts: the one form every decision reads, and how much of a text is read
(`_pii_forms.py`); numbers and their labels (`_pii_numbers.py`); values split over two
messages (`_pii_split.py`); the keyword patterns of secrets and health terms (`_pii_terms.py`).

Decisions worth knowing:
- A value split over two messages passes in each; `joined_rejection_reason` reads two texts
  together (the memory writer asks it about each new fact after the user's recent facts),
  putting their digits side by side only with evidence that they are one value
  (`_pii_split.py`): two readings of one mileage are a changed fact, not a national ID.
- Health-insurance product words ("بیمه تکمیلی", "health plan") are not health information;
  conditions, medications, diagnoses, pregnancy and procedures are (see _pii_terms.py).
"""

from __future__ import annotations

import re

from chatbot.memory._pii_category import PiiCategory
from chatbot.memory._pii_forms import MAX_CHECKED_CHARS, checkable_forms, fold_for_pii, normalize_for_pii
from chatbot.memory._pii_numbers import LABELS, number_categories
from chatbot.memory._pii_split import digits_read_together, words_read_together
from chatbot.memory._pii_terms import (
    EXPIRY_PATTERN,
    HEALTH_ACRONYMS_PATTERN,
    HEALTH_CATEGORY_WORDS,
    HEALTH_PATTERN,
    SECRET_PATTERN,
)
from chatbot.text import normalize_persian

__all__ = [
    "MAX_CHECKED_CHARS",
    "PiiCategory",
    "checkable_form",
    "find_pii",
    "is_health_category",
    "is_safe_for_memory",
    "joined_rejection_reason",
    "normalize_for_pii",
    "rejection_reason",
]

_EXPIRY_VALUE = re.compile(
    r"(?<![0-9/])(?:0[1-9]|1[0-2])\s*/\s*[0-9]{2}(?![0-9/])"  # MM/YY
    r"|(?<![0-9/])(?:1[34])?[0-9]{2}\s*/\s*(?:0[1-9]|1[0-2])(?![0-9/])"  # (13|14)YY/MM on Iranian cards
)


def _has_payment_secret(norm: str, card_context: bool) -> bool:
    """Find CVV2, PIN, password or one-time-code context, or a card expiry."""
    if SECRET_PATTERN.search(norm):
        return True
    for match in EXPIRY_PATTERN.finditer(norm):
        # "My policy expires on 1404/01/15" is a fact worth keeping; an expiry is a card secret
        # only next to a card, or written as a card writes it (MM/YY, YYYY/MM).
        if card_context or _EXPIRY_VALUE.search(norm, match.end(), match.end() + 40):
            return True
    return False


def _has_health(norm: str, nfkc: str) -> bool:
    """Find health information: conditions, medications, diagnoses, procedures, pregnancy.

    The zero-width non-joiner is removed like every invisible character ("دیا\u200cبت" is
    "دیابت"), yet in Persian it also ends a prefix ("پیش\u200cدیابت"): where the text has
    one, the form with it read as a space is searched too.
    """
    if HEALTH_PATTERN.search(norm) or HEALTH_ACRONYMS_PATTERN.search(nfkc):
        return True
    return "\u200c" in nfkc and HEALTH_PATTERN.search(fold_for_pii(nfkc.replace("\u200c", " "))) is not None


def checkable_form(text: str) -> str | None:
    """Return the form of `text` the guard matches on, or None when it is longer than the guard reads."""
    forms = checkable_forms(text)
    return None if forms is None else forms[1]


def find_pii(text: str) -> list[PiiCategory]:
    """Return the PII categories present in `text`, in enum order, never the values.

    Text longer than the guard reads (MAX_CHECKED_CHARS, before or after normalisation) is
    [UNCHECKED] and nothing else: the caller refuses it like any other finding.
    """
    forms = checkable_forms(text)
    if forms is None:
        return [PiiCategory.UNCHECKED]
    nfkc, norm = forms
    found = number_categories(norm)
    card_context = PiiCategory.CARD_NUMBER in found or any(m.lastgroup == "card" for m in LABELS.finditer(norm))
    if _has_payment_secret(norm, card_context):
        found.add(PiiCategory.PAYMENT_SECRET)
    if _has_health(norm, nfkc):
        found.add(PiiCategory.HEALTH)
    return [category for category in PiiCategory if category in found]


def is_health_category(category: str | None) -> bool:
    """Return True when an extractor's category names health information."""
    if not category:
        return False
    words = set(re.findall(r"[^\W_]+", normalize_persian(category).casefold()))
    return bool(words & HEALTH_CATEGORY_WORDS)


def rejection_reason(text: str, *, category: str | None = None) -> PiiCategory | None:
    """Return the first reason to refuse storing `text` (a category, never a value), or None."""
    if is_health_category(category):
        return PiiCategory.HEALTH
    found = find_pii(text)
    return found[0] if found else None


# Between two texts read together: no digit run, number-word run, spaced-letter run or
# multi-word term crosses it (each is read across the boundary only as `_pii_split` allows),
# while a label before it still names a number after it.
_WALL = " \x00 "


def joined_rejection_reason(earlier: str, later: str) -> PiiCategory | None:
    """Return why two texts a user wrote one after the other must not both be kept, or None.

    A value split over two messages ("my national ID starts 00123" then "it ends in 45679",
    "type 2 dia" then "it ends in betes") passes the guard in each. Read together, a label in
    one naming a number in the other, digits that are one value by the evidence
    `_pii_split` asks for, and a health word cut at the boundary or around a continuation
    cue, do not. Two values of one ordinary kind are a changed fact, not a split value.
    Each text alone is expected to pass already.
    """
    first, second = checkable_form(earlier), checkable_form(later)
    if first is None or second is None:
        return PiiCategory.UNCHECKED
    reason = rejection_reason(f"{earlier}{_WALL}{later}")
    if reason is not None:
        return reason
    together = digits_read_together(first, second)
    reason = rejection_reason(together) if together is not None else None
    if reason is not None:
        return reason
    if any(HEALTH_PATTERN.search(words) for words in words_read_together(first, second)):
        return PiiCategory.HEALTH
    return None


def is_safe_for_memory(text: str, *, category: str | None = None) -> bool:
    """Return False when `text` carries PII or `category` is health-like, True otherwise."""
    return rejection_reason(text, category=category) is None
