"""Ctrl-C in the middle of an answer on a terminal: the answer so far stays on the screen once,
the run is stopped in the service, and the chat goes on.

The terminal is emulated (pyte) from the bytes the chat writes, so what is checked is the
screen a user sees, after every cursor movement of the live view.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pyte
import pytest

from tests.fixtures.app import Replica, start_replica
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.wait import wait_until_sync

QUESTION = "Which documents do I need to file a car body claim?"
FIRST_LINE = "According to “How to file a car body claim › Documents you need”:"


@pytest.fixture(scope="module")
def slow_replica(migrated_database_url: str) -> Iterator[Replica]:
    """A replica whose offline answer streams slowly enough to be interrupted half-way."""
    asyncio.run(load_demo_kb(migrated_database_url))
    replica = start_replica(migrated_database_url, CHATBOT_OFFLINE_TOKEN_DELAY_MS="80")
    yield replica
    replica.kill(signal.SIGTERM)


class Screen:
    """`chatbot chat` on an emulated terminal, 120 columns by 40 rows."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.screen = pyte.Screen(120, 40)
        self.stream = pyte.ByteStream(self.screen)
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.process = subprocess.Popen(
            command,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
            start_new_session=True,
            # The terminal becomes the chat's controlling terminal, so Ctrl-C typed into it
            # is turned into SIGINT (and echoed as "^C") by the terminal itself.
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def wait_for(self, text: str, timeout: float = 60) -> None:
        """Read until `text` is on the screen (or the child closed the terminal)."""

        def shown() -> bool:
            if any(text in line for line in self.lines()):
                return True
            ready, _, _ = select.select([self.master], [], [], 0.2)  # waits for output, up to 0.2 s
            if ready:
                try:
                    # A terminal does nothing with ETX (a Ctrl-C echoed as itself); pyte
                    # would draw it as a character.
                    self.stream.feed(os.read(self.master, 65536).replace(b"\x03", b""))
                except OSError:  # the child closed the terminal: nothing more will come
                    return True
            return any(text in line for line in self.lines())

        try:
            wait_until_sync(shown, what=f"{text!r} on the screen", timeout=timeout, interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; screen:\n" + "\n".join(self.lines())) from None

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        os.write(self.master, b"\x04")
        code = self.process.wait(timeout=30)
        os.close(self.master)
        return code


def test_ctrl_c_mid_answer_leaves_the_answer_once_and_the_chat_goes_on(slow_replica: Replica, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "chatbot.cli", "chat", "--url", slow_replica.base_url, "--tenant", "acme",
               "--user", "u-interrupt", "--locale", "en-US"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env |= {"CHATBOT_SERVICE_SECRET": TEST_SECRET, "CHATBOT_DATA_DIR": str(tmp_path), "TERM": "xterm-256color"}
    screen = Screen(command, env)
    try:
        screen.wait_for("you ›")
        screen.send(QUESTION)
        screen.wait_for("The driver's")  # a few lines of the answer are on the screen
        os.write(screen.master, b"\x03")  # Ctrl-C, typed
        screen.wait_for("stopped: the answer was cancelled")
        lines = screen.lines()
        assert sum(line.strip() == FIRST_LINE for line in lines) == 1, "\n".join(lines)
        assert sum(line.strip() == "assistant" for line in lines) == 1, "\n".join(lines)
        screen.send("/quit")
    finally:
        code = screen.close()
    assert code == 0
