"""What the fuzzers share: how many examples to try, a replica to try them on, a tally to print."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings

from tests.fixtures.app import Replica, start_replica

# `make test` runs a few hundred examples in all; `make fuzz` sets this to thousands.
EXAMPLES = int(os.environ.get("CHATBOT_FUZZ_EXAMPLES", "25"))

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # requests go over real HTTP to a replica; their time is not what is tested
    database=None,  # no example database written into the worktree
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Tally:
    """Requests sent and statuses answered, printed at the end of a fuzzing module."""

    name: str
    statuses: Counter[int] = field(default_factory=Counter)

    def add(self, status: int) -> None:
        """Count one answered request."""
        self.statuses[status] += 1

    def report(self) -> str:
        """Return one line: requests tried and how they were answered."""
        total = sum(self.statuses.values())
        by_status = ", ".join(f"{status}: {count}" for status, count in sorted(self.statuses.items()))
        return f"{self.name}: {total} requests ({by_status})"


@pytest.fixture(scope="module")
def fuzz_replica(migrated_database_url: str) -> Iterator[Replica]:
    """Return one `chatbot serve` replica for a fuzzing module (read deadline 2 s)."""
    replica = start_replica(migrated_database_url, CHATBOT_REQUEST_READ_TIMEOUT_SECONDS="2")
    yield replica
    replica.kill(signal.SIGTERM)
