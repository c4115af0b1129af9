"""`cancel(thread_id, run_id)` of the typed clients, and Ctrl-C during an answer in the terminal chat."""

from __future__ import annotations

import asyncio
import contextlib
import io
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from chatbot.cli.chat import converse
from chatbot.client import AsyncChatbotClient, ChatbotClient, ChatbotError, ConflictError
from chatbot.client.events import Event
from chatbot.responses import ProblemDetails, RunEnd, TranscriptMessage, UserMemory
from tests.fixtures.app import Replica, start_replica
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.wait import wait_until

QUESTION = "What does travel insurance cover for medical costs abroad?"


@pytest.fixture(scope="module")
def slow_replica(migrated_database_url: str) -> Iterator[Replica]:
    # Offline answers a token every 40 ms: a cancel lands mid-answer.
    replica = start_replica(migrated_database_url, CHATBOT_OFFLINE_TOKEN_DELAY_MS="40")
    yield replica
    replica.kill(signal.SIGTERM)


def caller(**options: Any) -> dict[str, Any]:
    return {"secret": TEST_SECRET, "tenant_id": "acme", "user_id": "u1", "locale": "en-US", "timeout": 30, **options}


def test_the_sync_client_stops_a_streaming_run_and_says_409_once_it_is_over(slow_replica: Replica) -> None:
    with ChatbotClient(slow_replica.base_url, **caller()) as client:
        events = client.stream("client-cancel", QUESTION)
        seen = [next(events)]
        run_id = seen[0].data["run_id"]
        while seen[-1].event != "token":
            seen.append(next(events))
        client.cancel("client-cancel", run_id)
        seen += list(events)
        assert seen[-1].event == "error" and seen[-1].data["reason"] == "cancelled"
        with pytest.raises(ConflictError) as raised:
            client.cancel("client-cancel", run_id)
        assert raised.value.status == 409
        record = client.run_record("client-cancel", run_id)
        assert record.status == "cancelled" and record.answer is not None and record.answer.complete is False
        # The thread takes the next message at once.
        assert client.run("client-cancel", "Thanks").status in ("answered", "clarifying", "escalate")


async def test_the_async_client_cancels_a_run_another_request_waits_for(slow_replica: Replica) -> None:
    async with AsyncChatbotClient(slow_replica.base_url, **caller()) as client:
        waiting = asyncio.create_task(client.run("client-cancel-async", QUESTION))

        async def started_run() -> str | None:
            with contextlib.suppress(ChatbotError):  # 404 until the run has written the thread
                page = await client.messages("client-cancel-async")
                return page.messages[-1].run_id if page.messages else None
            return None

        # The user's message is durable before the answer starts.
        run_id = await wait_until(started_run, what="the run's message in the transcript")
        assert run_id is not None  # wait_until returns only a truthy value
        await client.cancel("client-cancel-async", run_id)
        with pytest.raises(ConflictError) as raised:
            await waiting  # `run` waits for the end: a cancelled run raises its 409 problem
        assert raised.value.status == 409


class Screen:
    """A chat view that records what it was shown; reads its lines from a list."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.shown: list[str] = []

    def read(self) -> str | None:
        return self.lines.pop(0) if self.lines else None

    def info(self, text: str) -> None:
        self.shown.append(f"info: {text}")

    def progress(self, data: dict[str, Any]) -> None:
        pass

    def token(self, text: str) -> None:
        self.shown.append(f"token: {text}")

    def end(self, end: RunEnd) -> None:
        self.shown.append(f"end: {end.status}")

    def error(self, error: Exception) -> None:
        self.shown.append(f"error: {error}")

    def history(self, messages: list[TranscriptMessage]) -> None:
        pass

    def memory(self, memory: UserMemory) -> None:
        pass


class Pressing:
    """A client whose first answer is cut by Ctrl-C after two tokens; records the cancels asked."""

    def __init__(self, *, ended: bool = False) -> None:
        self.cancels: list[tuple[str, str]] = []
        self.ended = ended
        self.asked: list[str] = []

    def stream(self, thread_id: str, content: str) -> Iterator[Event]:
        self.asked.append(content)
        yield Event("metadata", f"r-{len(self.asked)}:0", {"run_id": f"r-{len(self.asked)}", "thread_id": thread_id})
        yield Event("token", None, {"content": "Your policy "})
        if len(self.asked) == 1:
            yield Event("token", None, {"content": "covers"})
            raise KeyboardInterrupt
        end: dict[str, Any] = {
            "run_id": "r-2",
            "thread_id": thread_id,
            "status": "answered",
            "message": {"id": "m", "content": "ok"},
            "citations": [],
            "handoff_context": None,
        }
        yield Event("end", None, end)

    def cancel(self, thread_id: str, run_id: str) -> None:
        self.cancels.append((thread_id, run_id))
        if self.ended:
            problem = ProblemDetails(type="about:blank", title="Conflict", status=409, detail="already ended")
            raise ConflictError(409, problem)


@pytest.mark.parametrize("ended", [False, True])
def test_ctrl_c_during_an_answer_cancels_the_run_and_the_chat_goes_on(ended: bool) -> None:
    client = Pressing(ended=ended)
    screen = Screen(["first question", "second question"])
    converse(client, screen, "t-1")  # type: ignore[arg-type]
    assert client.cancels == [("t-1", "r-1")]
    assert client.asked == ["first question", "second question"]  # still chatting after Ctrl-C
    stopped = "error: the answer had already ended" if ended else "error: stopped: the answer was cancelled"
    assert stopped in screen.shown
    assert screen.shown[-1] == "end: answered"


def test_ctrl_c_at_the_prompt_still_leaves() -> None:
    # RichView.read turns Ctrl-C at the prompt into the end of input: the chat leaves, nothing is cancelled.
    from rich.console import Console

    from chatbot.cli.chat_view import RichView

    view = RichView(Console(file=io.StringIO()))
    pressed = threading.Event()

    def interrupted(*_: Any, **__: Any) -> str:
        pressed.set()
        raise KeyboardInterrupt

    view.console.input = interrupted  # type: ignore[method-assign]
    client = Pressing()
    converse(client, view, "t-2")  # type: ignore[arg-type]
    assert pressed.is_set() and client.asked == [] and client.cancels == []
