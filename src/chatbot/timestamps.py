"""Timestamps as the API and the records write them: RFC 3339, UTC, a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime, *, timespec: str = "milliseconds") -> str:
    """Return an aware datetime as RFC 3339 in UTC, with milliseconds by default (`2025-01-31T12:00:00.000Z`).

    `timespec` as `datetime.isoformat` takes it; the memory endpoints have always answered
    with the store's microseconds ("auto"), and clients may compare what they saw.
    """
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def now_rfc3339() -> str:
    """Return the current UTC time as RFC 3339 with milliseconds."""
    return rfc3339(datetime.now(UTC))
