"""Every HTTP answer the soak got, by kind of request and status, counted below the client.

The typed client retries `429` and `503` by itself; counting in the transport sees the
refused attempts too, so a `5xx` the client hid still fails the soak.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import httpx

_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(r"^/v1/threads/[^/]+/runs$"), "run"),
    ("GET", re.compile(r"^/v1/threads/[^/]+/runs/[^/]+/stream$"), "rejoin"),
    ("POST", re.compile(r"^/v1/threads/[^/]+/runs/[^/]+/feedback$"), "feedback"),
    ("GET", re.compile(r"^/v1/threads/[^/]+/runs/[^/]+$"), "run record"),
    ("GET", re.compile(r"^/v1/threads/[^/]+/messages$"), "page"),
    ("DELETE", re.compile(r"^/v1/threads/[^/]+$"), "delete thread"),
    ("GET", re.compile(r"^/v1/users/[^/]+/memory$"), "memory read"),
    ("DELETE", re.compile(r"^/v1/users/[^/]+$"), "erase user"),
]


def kind_of(request: httpx.Request) -> str:
    """Return the kind of a request: its endpoint, and for runs whether it streams or waits (JSON)."""
    for method, pattern, kind in _ROUTES:
        if request.method == method and pattern.match(request.url.path):
            if kind == "run":
                return "run (json)" if request.headers.get("accept") == "application/json" else "run (stream)"
            return kind
    return f"{request.method} other"


@dataclass
class Tally:
    """Counts of answers by (kind, status); `None` status: no answer came (dropped on purpose)."""

    counts: Counter[tuple[str, int | None]] = field(default_factory=Counter)

    def add(self, kind: str, status: int | None) -> None:
        """Count one answer."""
        self.counts[(kind, status)] += 1

    @property
    def total(self) -> int:
        """Return the number of requests sent."""
        return sum(self.counts.values())

    @property
    def server_errors(self) -> int:
        """Return how many answers were `5xx`."""
        return sum(n for (_, status), n in self.counts.items() if status is not None and status >= 500)

    def by_status(self) -> Counter[int | None]:
        """Return the counts by status alone."""
        totals: Counter[int | None] = Counter()
        for (_, status), n in self.counts.items():
            totals[status] += n
        return totals

    def table(self) -> str:
        """Return the counts as lines `kind: status n, status n`, kinds sorted."""
        kinds = sorted({kind for kind, _ in self.counts})
        lines = []
        for kind in kinds:
            cells = sorted(
                ((status, n) for (k, status), n in self.counts.items() if k == kind),
                key=lambda cell: -1 if cell[0] is None else cell[0],
            )
            text = ", ".join(f"{'no answer' if s is None else s}: {n}" for s, n in cells)
            lines.append(f"  {kind:<14} {text}")
        return "\n".join(lines)


# Idle connections are dropped here before the service drops them (CHATBOT_KEEP_ALIVE_SECONDS,
# 5 s), as docs/measurements/reliability.md asks of a balancer. With httpx's default (also 5 s) a request
# sent on a connection the service is closing at that instant fails with a ReadError and
# no answer: the first ten-minute soak met this once in 22,734 requests.
KEEPALIVE_EXPIRY_SECONDS = 2.0


class TallyingTransport(httpx.AsyncBaseTransport):
    """A real HTTP transport that counts every answer in a `Tally`."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.tally.add(kind_of(request), response.status_code)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
