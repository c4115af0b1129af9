"""Who is calling: the identity carried by the service token, never by a request body."""

from __future__ import annotations

import re
from dataclasses import dataclass

from chatbot.ids import TenantId, UserId

# Ids become store namespace labels and log fields: no dots (the store's label separator),
# nothing that needs quoting, bounded length. One rule for the token's claims (auth.py),
# the command line (cli/) and ingest: an id the CLI accepts is one a token can name.
CALLER_ID = re.compile(r"[A-Za-z0-9_:@-]{1,128}")
CALLER_ID_RULE = "1 to 128 characters of A-Z a-z 0-9 _ : @ -"


def is_caller_id(value: object) -> bool:
    """Return True when `value` is a valid tenant or user id (the whole string, no trailing newline)."""
    return isinstance(value, str) and CALLER_ID.fullmatch(value) is not None


def check_caller_id(value: object, what: str = "id") -> str:
    """Return `value` when it is a valid tenant or user id; raise ValueError naming `what` otherwise."""
    if not is_caller_id(value):
        raise ValueError(f"{what} must be {CALLER_ID_RULE}")
    return str(value)


@dataclass(frozen=True, slots=True)
class CallerContext:
    """Tenant, user and locale of one call, taken from a verified service token."""

    tenant_id: TenantId
    user_id: UserId
    locale: str = "fa-IR"

    @property
    def language(self) -> str:
        """Return the two-letter language the answer is written in ("fa" or "en")."""
        return "fa" if self.locale.lower().startswith("fa") else "en"
