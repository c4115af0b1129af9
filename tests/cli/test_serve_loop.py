"""`chatbot serve` runs on uvloop where uvloop exists (a dependency everywhere but Windows)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.fixtures.app import start_replica

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's maps in /proc")


def test_a_replica_serves_on_uvloop(migrated_database_url: str) -> None:
    replica = start_replica(migrated_database_url)
    try:
        # The replica's process has uvloop's extension mapped: uvicorn chose it for its loop.
        maps = Path(f"/proc/{replica.process.pid}/maps").read_text()
    finally:
        replica.kill(signal.SIGTERM)
    assert "uvloop" in maps
