"""How `chatbot chat` shows a conversation: plain lines through a pipe, rich on a terminal."""

from __future__ import annotations

import json
import sys
import unicodedata
from typing import Protocol

from pydantic import JsonValue
from rich.console import Console
from rich.json import JSON
from rich.live import Live
from rich.text import Text

from chatbot.client import ChatbotError, RunEnd, TranscriptMessage, UserMemory


def is_rtl(text: str) -> bool:
    """Return True when the first strongly directional character is right-to-left (Persian, Arabic, Hebrew)."""
    for ch in text:
        kind = unicodedata.bidirectional(ch)
        if kind in ("R", "AL"):
            return True
        if kind == "L":
            return False
    return False


def progress_text(data: dict[str, JsonValue]) -> str | None:
    """Return a line for a `progress` event (None for stages this view does not know)."""
    if data.get("stage") != "retrieval":
        return None
    if "chunks" in data:
        return f"retrieval: {data['chunks']} chunks found"
    return "retrieval: searching the knowledge base"


class View(Protocol):
    """What the chat loop asks of its output."""

    def read(self) -> str | None:
        """Return the next line the user typed, or None at the end of input."""

    def info(self, text: str) -> None:
        """Show a line about the session (thread, help)."""

    def progress(self, data: dict[str, JsonValue]) -> None:
        """Show a `progress` event."""

    def token(self, text: str) -> None:
        """Show the next piece of the answer."""

    def end(self, end: RunEnd) -> None:
        """Finish the answer: citations, status and, on escalation, the hand-off payload."""

    def error(self, error: ChatbotError | Exception) -> None:
        """Show a failed turn or command; the session goes on."""

    def history(self, messages: list[TranscriptMessage]) -> None:
        """Show the thread's transcript, oldest first."""

    def memory(self, memory: UserMemory) -> None:
        """Show what is remembered about the user."""


FORGET_HINT = "(/forget ID forgets one fact)"


def _error_line(error: ChatbotError | Exception) -> str:
    if isinstance(error, ChatbotError):
        return f"error: {error.status} {error.problem.title}: {error.problem.detail}"
    return f"error: {error}"


class PlainView:
    """One plain line per thing, for pipes and logs; the answer streams on its own line."""

    def __init__(self) -> None:
        self._answering = False

    def read(self) -> str | None:
        line = sys.stdin.readline()
        return None if line == "" else line.rstrip("\n")

    def _print(self, text: str) -> None:
        print(text, flush=True)

    def info(self, text: str) -> None:
        self._print(text)

    def progress(self, data: dict[str, JsonValue]) -> None:
        line = progress_text(data)
        if line:
            self._print(line)

    def token(self, text: str) -> None:
        if not self._answering:
            self._answering = True
            print("assistant: ", end="")
        print(text, end="", flush=True)

    def end(self, end: RunEnd) -> None:
        if not self._answering:
            print("assistant: " + end.message.content, end="")
        self._answering = False
        self._print("")
        self._print("citations: " + (", ".join(end.citations) or "none"))
        self._print(f"status: {end.status}")
        if end.handoff_context is not None:
            self._print("handoff: " + json.dumps(end.handoff_context.model_dump(), ensure_ascii=False))

    def error(self, error: ChatbotError | Exception) -> None:
        if self._answering:
            self._answering = False
            self._print("")
        self._print(_error_line(error))

    def history(self, messages: list[TranscriptMessage]) -> None:
        if not messages:
            self._print("history: no messages yet")
        for message in messages:
            cited = f" [{', '.join(message.citations)}]" if message.citations else ""
            self._print(f"{message.role}: {message.content}{cited}")

    def memory(self, memory: UserMemory) -> None:
        self._print("profile: " + json.dumps(memory.profile, ensure_ascii=False, sort_keys=True))
        if not memory.facts:
            self._print("facts: none")
        for fact in memory.facts:
            self._print(f"fact {fact.id} ({fact.category}): {fact.text}")
        if memory.facts:
            self._print(FORGET_HINT)


class RichView:
    """A terminal view: the answer grows in place, right-aligned when it is right-to-left."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self._live: Live | None = None
        self._answer = ""

    def read(self) -> str | None:
        try:
            return self.console.input("[bold cyan]you ›[/] ")
        except (EOFError, KeyboardInterrupt):  # Ctrl-D or Ctrl-C at the prompt: leave quietly
            self.console.print()
            return None

    def info(self, text: str) -> None:
        self.console.print(Text(text, style="dim"))

    def progress(self, data: dict[str, JsonValue]) -> None:
        line = progress_text(data)
        if line:
            self.console.print(Text("… " + line, style="dim"))

    def _render(self) -> Text:
        # Right-to-left answers read from the right edge; the terminal orders the letters.
        return Text(self._answer, justify="right" if is_rtl(self._answer) else "left")

    def token(self, text: str) -> None:
        self._answer += text
        if self._live is None:
            self.console.print(Text("assistant", style="bold green"))
            self._live = Live(self._render(), console=self.console, auto_refresh=False, vertical_overflow="visible")
            self._live.start()
        self._live.update(self._render(), refresh=True)

    def _close_answer(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._answer = ""

    def end(self, end: RunEnd) -> None:
        if self._live is None:  # a run without token events: show the answer whole
            self.token(end.message.content)
        self._close_answer()
        self.console.print(Text("citations: " + (", ".join(end.citations) or "none"), style="dim"))
        colour = {"answered": "green", "clarifying": "yellow", "escalate": "magenta"}[end.status]
        self.console.print(Text.assemble(("status: ", "dim"), (end.status, f"bold {colour}")))
        if end.handoff_context is not None:
            self.console.print(Text("hand-off to a human assistant:", style="bold magenta"))
            self.console.print(JSON(json.dumps(end.handoff_context.model_dump(), ensure_ascii=False)))

    def error(self, error: ChatbotError | Exception) -> None:
        self._close_answer()
        self.console.print(Text(_error_line(error), style="bold red"))

    def history(self, messages: list[TranscriptMessage]) -> None:
        if not messages:
            self.info("history: no messages yet")
        for message in messages:
            style = "bold cyan" if message.role == "user" else "bold green"
            self.console.print(Text(f"{message.role} · {message.created_at:%Y-%m-%d %H:%M}", style=style))
            self.console.print(Text(message.content, justify="right" if is_rtl(message.content) else "left"))
            if message.citations:
                self.console.print(Text("citations: " + ", ".join(message.citations), style="dim"))

    def memory(self, memory: UserMemory) -> None:
        self.console.print(Text("profile", style="bold"))
        self.console.print(JSON(json.dumps(memory.profile, ensure_ascii=False)))
        if not memory.facts:
            self.info("facts: none")
        for fact in memory.facts:
            line = Text.assemble((f"{fact.id} ", "dim"), (f"{fact.category}: ", "dim"), fact.text)
            line.justify = "right" if is_rtl(fact.text) else "left"
            self.console.print(line)
        if memory.facts:
            self.info(FORGET_HINT)
