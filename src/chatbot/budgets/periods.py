"""The budgets' periods: a UTC day and a UTC calendar month, and when each resets."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Literal

Period = Literal["day", "month"]


def period_starts(now: datetime) -> tuple[date, date]:
    """Return the first day of the current UTC day's and UTC month's periods."""
    today = now.astimezone(UTC).date()
    return today, today.replace(day=1)


def next_reset(period: Period, now: datetime) -> datetime:
    """Return the UTC midnight at which `period` starts again."""
    today = now.astimezone(UTC).date()
    if period == "day":
        following = today + timedelta(days=1)
    else:
        following = date(today.year + today.month // 12, today.month % 12 + 1, 1)
    return datetime(following.year, following.month, following.day, tzinfo=UTC)


def seconds_until_reset(period: Period, now: datetime) -> int:
    """Return whole seconds (at least 1) until `period` resets: a refused call's Retry-After."""
    return max(1, int(-(-(next_reset(period, now) - now.astimezone(UTC)).total_seconds() // 1)))
