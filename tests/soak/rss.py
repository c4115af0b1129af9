"""Resident memory of the replicas over the soak, read from /proc (psutil when it is installed)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path


def rss_kib(pid: int) -> int:
    """Return a process's resident set size in KiB (0 once it has exited)."""
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss // 1024)
    except ImportError:
        pass
    except Exception:  # psutil.NoSuchProcess and kin: the process is gone
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class RssSamples:
    """(seconds since the start, KiB) per replica, sampled at a fixed period."""

    pids: dict[str, int]
    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    async def sample_until(self, stop: asyncio.Event, period: float) -> None:
        """Sample every replica each `period` seconds until `stop` is set (once more at the end)."""
        started = time.monotonic()
        while True:
            now = time.monotonic() - started
            for name, pid in self.pids.items():
                self.samples.setdefault(name, []).append((now, rss_kib(pid)))
            try:
                await asyncio.wait_for(stop.wait(), period)
            except TimeoutError:
                continue
            now = time.monotonic() - started
            for name, pid in self.pids.items():
                self.samples[name].append((now, rss_kib(pid)))
            return

    def at(self, name: str, fraction: float) -> int:
        """Return the sample nearest to `fraction` (0 to 1) of the run, in KiB."""
        series = self.samples[name]
        target = series[-1][0] * fraction
        return min(series, key=lambda s: abs(s[0] - target))[1]

    def second_half_growth(self, name: str) -> float:
        """Return how much the replica grew from the middle of the run to its end (0.1 = 10%)."""
        middle = self.at(name, 0.5)
        return (self.at(name, 1.0) - middle) / middle if middle else 0.0

    def table(self) -> str:
        """Return lines `replica: start / middle / end MiB (second half +x%)`."""
        lines = []
        for name in sorted(self.samples):
            start, middle, end = (self.at(name, f) / 1024 for f in (0.0, 0.5, 1.0))
            growth = self.second_half_growth(name) * 100
            lines.append(
                f"  {name}: start {start:.1f} MiB, middle {middle:.1f} MiB, end {end:.1f} MiB "
                f"(second half {growth:+.1f}%, peak {max(kib for _, kib in self.samples[name]) / 1024:.1f} MiB)"
            )
        return "\n".join(lines)
