"""Timestamps as the API and the records write them: RFC 3339, UTC, milliseconds, a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime) -> str:
    """Return an aware datetime as RFC 3339 in UTC with milliseconds (`2025-01-31T12:00:00.000Z`)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_rfc3339() -> str:
    """Return the current UTC time as RFC 3339 with milliseconds."""
    return rfc3339(datetime.now(UTC))
