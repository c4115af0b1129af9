"""`chatbot chat` through a pipe and through a pseudo-terminal, against a real replica."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

from chatbot.client import ChatbotClient, TranscriptMessage
from tests.fixtures.app import Replica
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.wait import wait_until_sync

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
EN_QUESTIONS = ["What does travel insurance cover for medical costs abroad?", "How do I cancel my car body policy?"]
FA_QUESTIONS = ["بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟", "برای لغو بیمه‌نامه بدنه چه کار کنم؟"]


def chat_command(replica: Replica, user: str, thread: str, locale: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "chatbot.cli",
        "chat",
        "--url",
        replica.base_url,
        "--tenant",
        "acme",
        "--user",
        user,
        "--thread",
        thread,
        "--locale",
        locale,
    ]


def chat_env(tmp_path: os.PathLike[str]) -> dict[str, str]:
    # The data dir points nowhere useful: the secret must come from the environment.
    return {**os.environ, "CHATBOT_SERVICE_SECRET": TEST_SECRET, "CHATBOT_DATA_DIR": str(tmp_path), "COLUMNS": "200"}


def transcript(replica: Replica, user: str, thread: str) -> list[TranscriptMessage]:
    with ChatbotClient(replica.base_url, secret=TEST_SECRET, tenant_id="acme", user_id=user) as client:
        return client.messages(thread, limit=100).messages


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_chat_through_a_pipe_prints_answers_citations_status_and_history(kb_replica: Replica, tmp_path: Path) -> None:
    lines = "\n".join([*EN_QUESTIONS, "/history", ""])
    done = subprocess.run(
        chat_command(kb_replica, "u-pipe", "cli-pipe", "en-US"),
        input=lines,
        capture_output=True,
        text=True,
        env=chat_env(tmp_path),
        timeout=60,
        check=True,
    )
    messages = transcript(kb_replica, "u-pipe", "cli-pipe")
    assert [m.content for m in messages if m.role == "user"] == EN_QUESTIONS
    answers = [m for m in messages if m.role == "assistant"]
    assert len(answers) == 2 and all(a.citations for a in answers)
    # Each turn: progress, the answer (streamed; it may span lines), its citations and status.
    turns = "".join(
        f"retrieval: searching the knowledge base\nretrieval: {n} chunks found\n"
        f"assistant: {a.content}\ncitations: {', '.join(a.citations)}\nstatus: answered\n"
        for n, a in zip(re.findall(r"retrieval: (\d+) chunks found", done.stdout), answers, strict=True)
    )
    history = "".join(
        f"{m.role}: {m.content}" + (f" [{', '.join(m.citations)}]" if m.citations else "") + "\n" for m in messages
    )
    assert (
        done.stdout == f"thread: cli-pipe (commands: /history, /memory, /forget ID, /new, /quit (or end of input); "
        f"anything else is a message)\n{turns}{history}"
    )


def test_chat_through_a_pipe_shows_the_handoff_and_starts_new_threads(kb_replica: Replica, tmp_path: Path) -> None:
    lines = "\n".join(["I want to talk to a human", "/new", "/history", "/quit", "never sent"])
    done = subprocess.run(
        chat_command(kb_replica, "u-handoff", "cli-handoff", "en-US"),
        input=lines,
        capture_output=True,
        text=True,
        env=chat_env(tmp_path),
        timeout=60,
        check=True,
    )
    out = done.stdout.splitlines()
    assert "status: escalate" in out
    handoff = next(line for line in out if line.startswith("handoff: "))
    assert '"reason": "user_requested_human"' in handoff and "I want to talk to a human" in handoff
    assert re.fullmatch(r"thread: chat-[0-9a-f]{12}", out[-2]) and out[-1] == "history: no messages yet"
    assert [m.role for m in transcript(kb_replica, "u-handoff", "cli-handoff")] == ["user", "assistant"]


class Terminal:
    """`chatbot chat` on a pseudo-terminal 200 columns wide."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        env = {k: v for k, v in env.items() if k != "COLUMNS"} | {"TERM": "xterm-256color"}
        self.process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.output = ""

    def expect(self, pattern: str, count: int, timeout: float = 60) -> None:
        """Read until `pattern` has appeared `count` times in the output (or the child closed the terminal)."""

        def seen() -> bool:
            if self.output.count(pattern) >= count:
                return True
            ready, _, _ = select.select([self.master], [], [], 0.5)  # waits for output, up to 0.5 s
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the child closed the terminal: nothing more will come
                    return True
                self.output += ANSI.sub("", chunk.decode("utf-8", "replace"))
            return self.output.count(pattern) >= count

        try:
            wait_until_sync(seen, what=f"{pattern!r} x{count} on the terminal", timeout=timeout, interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; got:\n{self.output[-2000:]}") from None

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        os.write(self.master, b"\x04")  # end of input
        code = self.process.wait(timeout=30)
        os.close(self.master)
        return code


def test_chat_on_a_terminal_streams_persian_answers_and_shows_history(kb_replica: Replica, tmp_path: Path) -> None:
    terminal = Terminal(chat_command(kb_replica, "u-tty", "cli-tty", "fa-IR"), chat_env(tmp_path))
    try:
        terminal.expect("you ›", 1)
        for turn, question in enumerate(FA_QUESTIONS, start=1):
            terminal.send(question)
            terminal.expect("status: ", turn)
            terminal.expect("you ›", turn + 1)
        terminal.send("/history")
        terminal.expect("you ›", 4)
    finally:
        code = terminal.close()
    assert code == 0
    messages = transcript(kb_replica, "u-tty", "cli-tty")
    answers = [m for m in messages if m.role == "assistant"]
    assert [m.content for m in messages if m.role == "user"] == FA_QUESTIONS and len(answers) == 2
    before_history = squash(terminal.output[: terminal.output.rindex("/history")])
    history = squash(terminal.output[terminal.output.rindex("/history") :])
    for answer in answers:
        assert answer.citations and answer.content.strip()
        assert squash(answer.content) in before_history  # streamed live
        assert "citations: " + ", ".join(answer.citations) in before_history
        assert squash(answer.content) in history
    assert before_history.count("status: answered") == 2
    assert all(squash(q) in history for q in FA_QUESTIONS)


def test_chat_signs_with_the_dev_secret_that_make_dev_keeps(kb_replica: Replica, tmp_path: Path) -> None:
    (tmp_path / "dev-secret").write_text(TEST_SECRET + "\n")
    env = {k: v for k, v in chat_env(tmp_path).items() if k != "CHATBOT_SERVICE_SECRET"}
    done = subprocess.run(
        chat_command(kb_replica, "u-dev", "cli-dev", "en-US"),
        input=EN_QUESTIONS[0] + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert "status: answered" in done.stdout

    (tmp_path / "dev-secret").unlink()
    refused = subprocess.run(
        chat_command(kb_replica, "u-dev", "cli-dev", "en-US"),
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode == 2 and "CHATBOT_SERVICE_SECRET" in refused.stderr


def test_a_refused_message_is_reported_and_the_session_goes_on(kb_replica: Replica, tmp_path: Path) -> None:
    lines = "\n".join(["x" * 8001, "/bogus", EN_QUESTIONS[0]])
    done = subprocess.run(
        chat_command(kb_replica, "u-refused", "cli-refused", "en-US"),
        input=lines,
        capture_output=True,
        text=True,
        env=chat_env(tmp_path),
        timeout=60,
        check=True,
    )
    out = done.stdout.splitlines()
    assert out[1].startswith("error: 422 Unprocessable") and "8000" in out[1] and "xxx" not in out[1]
    assert out[2].startswith("commands: /history")
    assert out[-1] == "status: answered"
    assert [m.role for m in transcript(kb_replica, "u-refused", "cli-refused")] == ["user", "assistant"]


def test_forget_with_a_dot_segment_is_refused_and_the_memory_stays(kb_replica: Replica, tmp_path: Path) -> None:
    with ChatbotClient(kb_replica.base_url, secret=TEST_SECRET, tenant_id="acme", user_id="u-forget-dots") as client:
        assert client.run("cli-dots", "remember that my car is a Peugeot 206").status == "answered"
        wait_until_sync(lambda: bool(client.memory().facts), what="the fact remembered", timeout=10)
        kept = client.memory().facts
    done = subprocess.run(
        chat_command(kb_replica, "u-forget-dots", "cli-dots", "en-US"),
        input="/forget ..\n/forget ../..\n",
        capture_output=True,
        text=True,
        env=chat_env(tmp_path),
        timeout=60,
        check=True,
    )
    out = done.stdout.splitlines()
    assert out[1].startswith("error: ") and "'..' is not an id" in out[1], out
    assert out[2].startswith("error: 404"), out
    with ChatbotClient(kb_replica.base_url, secret=TEST_SECRET, tenant_id="acme", user_id="u-forget-dots") as client:
        assert client.memory().facts == kept
