"""The kinds of personal data the memory guard refuses, apart so every part of the guard can name them."""

from __future__ import annotations

from enum import StrEnum


class PiiCategory(StrEnum):
    """Kinds of personal data the memory store refuses (values double as metric labels)."""

    NATIONAL_ID = "national_id"
    CARD_NUMBER = "card_number"
    IBAN = "iban"
    PAYMENT_SECRET = "payment_secret"
    HEALTH = "health"
    UNCHECKED = "unchecked"
    """Longer than the guard reads once normalised: refused because it cannot be shown safe."""
