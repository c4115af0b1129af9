"""`make dev` as a newcomer runs it: stopped by any of the usual signals, nothing stays running.

Each start runs the real Makefile target (`-o` keeps make from reinstalling the venv) in a
process group of its own, on a free port and a data directory of the test's own, and the
group gets the signal a terminal or a supervisor sends. The embedded Postgres detaches from
that group, so only a clean exit of `chatbot dev` stops it: each check is by pid.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from tests.fixtures.sse import parse_sse
from tests.fixtures.wait import wait_until_sync

ROOT = Path(__file__).resolve().parents[2]
HANDLES = ".handle_pids.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Dev:
    """One `make dev` in its own process group, with its output and pids."""

    def __init__(self, data_dir: Path, port: int, log: Path, env: dict[str, str]) -> None:
        self.data_dir, self.port, self.log = data_dir, port, log
        with log.open("wb") as out:
            self.make = subprocess.Popen(
                ["make", "--no-print-directory", "-o", ".venv/.installed", "dev"],
                cwd=ROOT,
                env={**os.environ, "CHATBOT_DATA_DIR": str(data_dir), "PORT": str(port), **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        wait_until_sync(
            lambda: "Ready." in self.output() or self.make.poll() is not None, what="make dev ready", timeout=180
        )
        assert "Ready." in self.output(), self.output()[-3000:]

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pg"

    def postgres_pid(self) -> int:
        return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])

    def handles(self) -> list[int]:
        return list(json.loads((self.pgdata / HANDLES).read_text()))

    def bearer(self) -> str:
        found = re.search(r"Authorization: Bearer ([\w.-]+)", self.output())
        assert found, self.output()
        return found.group(1)

    def stop(self, sig: signal.Signals) -> list[int]:
        """Signal the whole group as a terminal does; return the pids that must be gone."""
        pids = [self.make.pid, *self.handles(), self.postgres_pid()]
        os.killpg(self.make.pid, sig)
        self.make.wait(timeout=60)
        wait_until_sync(lambda: all(gone(pid) for pid in pids), what="every process of make dev gone", timeout=60)
        return pids


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The test's own data directory; whatever Postgres a failed check left there is stopped."""
    path = tmp_path / "data"
    yield path
    pid_file = path / "pg" / "postmaster.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text().splitlines()[0])
        if not gone(pid):
            os.kill(pid, signal.SIGTERM)
            wait_until_sync(lambda: gone(pid), what="the left-over Postgres stopped")


@contextmanager
def dev(tmp_path: Path, data_dir: Path, name: str, **env: str) -> Iterator[Dev]:
    started = Dev(data_dir, free_port(), tmp_path / f"{name}.log", env)
    try:
        yield started
    finally:
        if started.make.poll() is None:  # a failed check: still stop what the test started
            os.killpg(started.make.pid, signal.SIGKILL)
            started.make.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_to_make_dev_leaves_no_process_and_the_next_start_is_clean(
    tmp_path: Path, data_dir: Path, sig: signal.Signals
) -> None:
    for round_ in ("first", "second"):
        with dev(tmp_path, data_dir, round_) as started:
            started.wait_ready()
            assert len(started.handles()) == 1  # only this start's `chatbot dev`
            pids = started.stop(sig)
            assert all(gone(pid) for pid in pids)
            assert started.handles() == []
            assert not (started.pgdata / "postmaster.pid").exists()


def test_a_stale_handle_file_does_not_keep_postgres_running(tmp_path: Path, data_dir: Path) -> None:
    with dev(tmp_path, data_dir, "killed") as killed:
        killed.wait_ready()
        (crashed,) = killed.handles()
        leaked = killed.postgres_pid()
        # A crash that skips every clean-up: the Postgres stays, its holder's pid stays listed.
        os.killpg(killed.make.pid, signal.SIGKILL)
        killed.make.wait()
    wait_until_sync(lambda: gone(crashed), what="the killed dev process gone")
    assert not gone(leaked)
    # A pid the system has given to an unrelated process since, listed as well.
    other = subprocess.Popen(["sleep", "600"])
    try:
        (data_dir / "pg" / HANDLES).write_text(json.dumps([crashed, other.pid]))
        with dev(tmp_path, data_dir, "after") as after:
            after.wait_ready()
            assert after.postgres_pid() == leaked  # the running server is joined, not started twice
            (holder,) = after.handles()  # the stale two dropped, this start's own added
            assert holder not in (crashed, other.pid)
            pids = after.stop(signal.SIGTERM)
        assert leaked in pids and gone(leaked)
        assert other.poll() is None  # the unrelated process is left alone
    finally:
        other.kill()
        other.wait()


def test_the_port_setting_the_banner_after_the_bind_and_the_token_delay(tmp_path: Path, data_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run(
            ["make", "--no-print-directory", "-o", ".venv/.installed", "dev"],
            cwd=ROOT,
            env={**os.environ, "CHATBOT_DATA_DIR": str(data_dir), "PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert busy.returncode != 0
    assert "Ready" not in busy.stdout
    assert f"port {port} on 127.0.0.1 is already in use" in busy.stderr
    assert "Traceback" not in busy.stderr + busy.stdout
    assert not (data_dir / "pg" / "postmaster.pid").exists()  # it stopped before starting anything

    delay_ms = 150
    with dev(tmp_path, data_dir, "delay", CHATBOT_OFFLINE_TOKEN_DELAY_MS=str(delay_ms)) as started:
        started.wait_ready()
        assert f"curl -N http://127.0.0.1:{started.port}/v1/threads/demo-1/runs" in started.output()
        response = httpx.post(
            f"http://127.0.0.1:{started.port}/v1/threads/demo-1/runs",
            headers={"Authorization": f"Bearer {started.bearer()}"},
            json={"message": {"content": "How do I cancel my car body policy?"}},
            timeout=120,
        )
        tokens = [data for event, data in parse_sse(response.text) if event == "token"]
        assert response.status_code == 200 and len(tokens) > 3
        # The served settings are the banner's: the offline model paces its tokens by the setting.
        assert f"streams its tokens {delay_ms} ms apart" in started.output()
        started.stop(signal.SIGTERM)
