"""`chatbot chat`: talk to a running service from a terminal or a pipe, as the backend would."""

from __future__ import annotations

import os
import secrets
import termios
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import httpx
import typer

from chatbot.cli import common
from chatbot.cli.chat_view import PlainView, RichView, View
from chatbot.cli.failure_line import sentence
from chatbot.client import (
    ChatbotClient,
    ChatbotError,
    ConflictError,
    InvalidId,
    RateLimitedError,
    Retries,
    StreamInterrupted,
)
from chatbot.client.errors import error_from_event
from chatbot.client.events import Event
from chatbot.ids import RunId, ThreadId
from chatbot.responses import TranscriptMessage

HELP = "commands: /history, /memory, /forget ID, /new, /quit (or end of input); anything else is a message"


def _secret(data_dir: Path) -> str:
    # The service's secret, or the one `chatbot dev` keeps under its data dir: `make dev` then
    # needs no set-up. Never created here: a secret the server does not know would only 401.
    settings = common.load_settings(environment="dev")
    if settings.service_secret is not None:
        return settings.service_secret.get_secret_value()
    path = data_dir / common.DEV_SECRET_FILE
    if path.exists():
        return path.read_text().strip()
    common.fail("no CHATBOT_SERVICE_SECRET set (and no dev secret under .chatbot/): cannot sign tokens", 2)
    raise AssertionError("unreachable")


def new_thread_id() -> ThreadId:
    """Return a fresh thread id."""
    return ThreadId(f"chat-{secrets.token_hex(6)}")


def _transcript(client: ChatbotClient, thread: ThreadId) -> list[TranscriptMessage]:
    messages: list[TranscriptMessage] = []
    before = None
    while True:
        try:
            page = client.messages(thread, limit=100, before=before)
        except ChatbotError as exc:
            if exc.status == 404 and not messages:
                return []  # nothing said on this thread yet
            raise
        messages[:0] = page.messages
        if not page.has_more:
            return messages
        before = page.next_before


def _ask(client: ChatbotClient, view: View, thread: ThreadId, text: str) -> None:
    event: Event
    run_id: RunId | None = None
    try:
        for event in client.stream(thread, text):
            if event.event == "metadata":
                run_id = RunId(str(event.data.get("run_id") or "")) or None
            _show(view, event)
    except KeyboardInterrupt:
        if run_id is None:
            raise  # no run yet to stop
        _stop(client, view, thread, run_id)


@contextmanager
def no_echo_of_ctrl_c(fd: int) -> Iterator[None]:
    """Keep the terminal from echoing Ctrl-C as "^C" while the chat runs (ECHOCTL off).

    The live view pads each line of the growing answer to the terminal's width; a "^C"
    echoed after such a line wraps to a new one, the view's count of its own lines is then
    one short, and its last redraw repeated the answer's first line. The chat says itself
    that the answer was stopped.
    """
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:  # not a terminal
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHOCTL
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


def _stop(client: ChatbotClient, view: View, thread: ThreadId, run_id: RunId) -> None:
    """Ctrl-C during an answer: stop the run in the service too (no more tokens are spent on it)."""
    try:
        client.cancel(thread, run_id)
    except ConflictError:
        view.error(RuntimeError("the answer had already ended"))
        return
    view.error(RuntimeError("stopped: the answer was cancelled"))


def _show(view: View, event: Event) -> None:
    if event.event == "progress":
        view.progress(event.data)
    elif event.event == "token":
        view.token(str(event.data.get("content", "")))
    elif event.event == "end":
        view.end(event.end())
    elif event.event == "error":
        view.error(error_from_event(event.data))


def converse(client: ChatbotClient, view: View, thread: ThreadId) -> None:
    """Read lines until `/quit` or the end of input; each is a message or a command."""
    view.info(f"thread: {thread} ({HELP})")
    while (line := view.read()) is not None:
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            break
        try:
            if text == "/history":
                view.history(_transcript(client, thread))
            elif text == "/memory":
                view.memory(client.memory())
            elif text.startswith("/forget "):
                client.forget_fact(text.removeprefix("/forget ").strip())
                view.info("forgotten")
            elif text == "/new":
                thread = new_thread_id()
                view.info(f"thread: {thread}")
            elif text.startswith("/"):
                view.info(HELP)
            else:
                _ask(client, view, thread, text)
        except httpx.TransportError as exc:  # the service went away mid-session: say so, go on
            view.error(RuntimeError(sentence(exc)))
        except RateLimitedError as exc:
            view.error(RuntimeError(f"rate limited: try again in {exc.retry_after or 60:.0f} s"))
        except (ChatbotError, StreamInterrupted, InvalidId) as exc:
            view.error(exc)
        except KeyboardInterrupt:
            view.error(RuntimeError("interrupted"))


def chat(
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="Base URL of the service."),
    tenant: str = typer.Option(..., "--tenant", help="tenant_id of the tokens.", callback=common.caller_id),
    user: str = typer.Option(..., "--user", help="user_id of the tokens.", callback=common.caller_id),
    thread: str | None = typer.Option(None, "--thread", help="Thread to continue (default: a new one)."),
    locale: str = typer.Option("fa-IR", "--locale", help="locale of the tokens (fa-* answers in Persian)."),
    plain: bool = typer.Option(False, "--plain", help="Plain lines even on a terminal."),
) -> None:
    """Chat with a running service; tokens are minted with CHATBOT_SERVICE_SECRET."""
    settings = common.load_settings(environment="dev")
    secret = _secret(settings.data_dir)
    try:  # fail at once, in one line, when nothing listens at --url
        httpx.get(f"{url.rstrip('/')}/healthz", timeout=10)
    except httpx.TransportError as exc:
        common.fail(sentence(exc))
    interactive = not plain and os.isatty(0) and os.isatty(1)
    view: View = RichView() if interactive else PlainView()
    # A chat waits a few seconds at most for a busy service, then says so.
    retries = Retries(attempts=2, max_wait=5)
    with ChatbotClient(
        url,
        secret=secret,
        tenant_id=tenant,
        user_id=user,
        locale=locale,
        issuer=settings.jwt_issuer,
        audience=settings.jwt_audience,
        retries=retries,
    ) as client:
        with no_echo_of_ctrl_c(0) if interactive else nullcontext():
            converse(client, view, ThreadId(thread) if thread else new_thread_id())
