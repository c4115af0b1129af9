"""`chatbot serve --workers 2`: /metrics counts the runs of every worker, whichever worker answers."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from tests.fixtures.app import Replica, free_port
from tests.fixtures.client import EN_QUESTION
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until_sync

RUNS = 24


def start_workers(database_url: str, log: Path, **env: str) -> Replica:
    """Start `chatbot serve --workers 2` and wait until it is ready."""
    port = free_port()
    environment = {
        **{k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"},
        "CHATBOT_DATABASE_URL": database_url,
        "CHATBOT_SERVICE_SECRET": TEST_SECRET,
        "CHATBOT_ENVIRONMENT": "test",
        "CHATBOT_OFFLINE_TOKEN_DELAY_MS": "20",
        **env,
    }
    command = [sys.executable, "-m", "chatbot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as sink:
        process = subprocess.Popen([*command, "--workers", "2"], env=environment, stdout=sink, stderr=sink)
    replica = Replica(process, f"http://127.0.0.1:{port}")

    def ready() -> bool:
        assert process.poll() is None, log.read_text()
        # Both workers must be serving, or every run could land on the one that started first.
        if log.read_text().count("Application startup complete") != 2:
            return False
        try:
            return httpx.get(f"{replica.base_url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until_sync(ready, what="both workers to be ready", timeout=120, interval=0.2)
    except AssertionError:
        replica.kill()
        raise
    return replica


@pytest.fixture(scope="module")
def kb_url(migrated_database_url: str) -> str:
    asyncio.run(load_demo_kb(migrated_database_url))
    return migrated_database_url


async def run_many(base_url: str) -> None:
    async def one(i: int) -> None:
        # A connection of its own per run, so the kernel spreads them over both workers.
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
            response = await client.post(
                f"/v1/threads/w-{i}/runs", json={"message": {"content": EN_QUESTION}}, headers=auth(locale="en-US")
            )
            assert response.status_code == 200 and "event: end" in response.text

    await asyncio.gather(*(one(i) for i in range(RUNS)))


def answered_in(text: str) -> float:
    match = re.search(r'^chatbot_runs_total\{status="answered"\} (\S+)$', text, re.MULTILINE)
    assert match, text
    return float(match.group(1))


def scrapes(base_url: str, times: int = 12) -> list[float]:
    """Scrape /metrics on fresh connections (each may land on either worker)."""
    return [answered_in(httpx.get(f"{base_url}/metrics", timeout=10).text) for _ in range(times)]


@pytest.fixture
def stopper() -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.kill(signal.SIGTERM)


def test_every_scrape_counts_the_runs_of_both_workers(kb_url: str, tmp_path: Path, stopper: list[Replica]) -> None:
    replica = start_workers(kb_url, tmp_path / "serve.log")
    stopper.append(replica)
    asyncio.run(run_many(replica.base_url))
    assert scrapes(replica.base_url) == [RUNS] * 12
    # The per-run log lines of the workers are JSON lines too (workers set up their own logging).
    replica.kill(signal.SIGTERM)
    finished = [line for line in (tmp_path / "serve.log").read_text().splitlines() if '"run finished"' in line]
    assert len(finished) == RUNS


def test_an_operators_metrics_dir_is_emptied_at_start_and_shows_both_workers(
    kb_url: str, tmp_path: Path, stopper: list[Replica]
) -> None:
    directory = tmp_path / "prom"
    directory.mkdir()
    stale = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    bump = "import chatbot.metrics as m; m.RUNS.labels('answered').inc(1000)"
    subprocess.run([sys.executable, "-c", bump], env=stale, check=True)  # a previous run's counts
    assert list(directory.glob("counter_*.db"))

    replica = start_workers(kb_url, tmp_path / "serve.log", PROMETHEUS_MULTIPROC_DIR=str(directory))
    stopper.append(replica)
    asyncio.run(run_many(replica.base_url))
    assert scrapes(replica.base_url) == [RUNS] * 12  # nothing of the stale 1000

    per_worker = []
    for path in sorted(directory.glob("counter_*.db")):
        merged = MultiProcessCollector.merge([str(path)], accumulate=True)
        per_worker.append(
            sum(
                s.value
                for metric in merged
                if metric.name == "chatbot_runs"
                for s in metric.samples
                if s.name == "chatbot_runs_total" and s.labels.get("status") == "answered"
            )
        )
    # Each worker keeps its own file; which worker accepts a connection is the kernel's
    # choice, so one may have run every run: the scrape above summed whatever they hold.
    assert len(per_worker) >= 2 and sum(per_worker) == RUNS
