"""Who is calling: the identity carried by the service token, never by a request body."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CallerContext:
    """Tenant, user and locale of one call, taken from a verified service token."""

    tenant_id: str
    user_id: str
    locale: str = "fa-IR"

    @property
    def language(self) -> str:
        """Return the two-letter language the answer is written in ("fa" or "en")."""
        return "fa" if self.locale.lower().startswith("fa") else "en"
