"""`ChatbotClient`: the service's API for synchronous callers, over httpx."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx

from chatbot.client import api
from chatbot.client.errors import StreamInterrupted, error_from_event, error_from_response, retry_after_seconds
from chatbot.client.events import Event, RunFollower, SSEDecoder
from chatbot.client.tokens import TokenSource, token_source, user_of
from chatbot.responses import ErasureReport, MessagesPage, RunEnd, RunRecord, UserMemory

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)  # reads: the service sends a keep-alive every 10 s
# Idle connections are dropped before the service closes them (CHATBOT_KEEP_ALIVE_SECONDS,
# default 5): with both at 5 s a request sent as the service hangs up gets no answer
# (the soak met it once in 22,734 requests).
DEFAULT_LIMITS = httpx.Limits(keepalive_expiry=2.0)


class ChatbotClient:
    """Call the conversational agent service: runs, streams, transcripts, feedback, memory, erasure.

    Construct it with `token` (a string, or a callable returning one per request) or with
    `secret`, `tenant_id`, `user_id` and `locale` to mint HS256 service tokens here.
    Problem answers raise `ChatbotError` (`ConflictError` for 409, `RateLimitedError` for
    429); 429 and 503 are retried as `retries` says, 409 never.
    """

    def __init__(
        self,
        base_url: str,
        token: TokenSource | None = None,
        *,
        secret: str | None = None,
        tenant_id: str | None = None,
        user_id: str | None = None,
        locale: str | None = None,
        issuer: str = "main-backend",
        audience: str = "chatbot-agent",
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retries: api.Retries | None = None,
        resumes: int = 1,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._token = token_source(
            token, secret=secret, tenant_id=tenant_id, user_id=user_id, locale=locale, issuer=issuer, audience=audience
        )
        self._user_id = user_id
        self._retries = retries or api.Retries()
        self._resumes = resumes
        self._sleep = sleep
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport, limits=DEFAULT_LIMITS)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> ChatbotClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # Runs -------------------------------------------------------------------------------

    def run(self, thread_id: str, content: str) -> RunEnd:
        """Send one message and return the run's `end` (a failed run raises its problem)."""
        for event in self.stream(thread_id, content):
            if event.event == "end":
                return event.end()
            if event.event == "error":
                raise error_from_event(event.data)
        raise AssertionError("unreachable: a stream ends with end or error, or raises")

    def stream(self, thread_id: str, content: str) -> Iterator[Event]:
        """Send one message and yield the run's events as they arrive, `metadata` to `end` or `error`.

        A stream that breaks after `metadata` is rejoined (`resumes` times, once by default)
        from the last event received, and continues without a repeated or missing token.
        """
        follower = RunFollower(thread_id)
        response = self._send(
            "POST", api.runs_path(thread_id), json=api.run_body(content), headers={"Accept": api.SSE}, stream=True
        )
        yield from self._follow(response, follower)

    def join(self, thread_id: str, run_id: str, last_event_id: str | None = None) -> Iterator[Event]:
        """Rejoin a run's stream (after `last_event_id`, or from its start) and follow it to its end."""
        follower = RunFollower.joining(thread_id, run_id, last_event_id)
        yield from self._follow(self._rejoin(follower), follower)

    def run_record(self, thread_id: str, run_id: str) -> RunRecord:
        """Return what the agent saw and said in one run."""
        return RunRecord.model_validate(self._send("GET", api.run_path(thread_id, run_id)).json())

    def feedback(self, thread_id: str, run_id: str, score: Literal["up", "down"], comment: str | None = None) -> None:
        """Rate a run's answer (sending again replaces the earlier rating)."""
        self._send("POST", api.feedback_path(thread_id, run_id), json=api.feedback_body(score, comment))

    def cancel(self, thread_id: str, run_id: str) -> None:
        """Stop a run in flight ("stop generating"); its stream ends with the `cancelled` error.

        Returns once the thread takes a new message. Raises `ConflictError` (409) when the run
        had already ended.
        """
        self._send("POST", api.cancel_path(thread_id, run_id))

    # Threads ----------------------------------------------------------------------------

    def messages(self, thread_id: str, limit: int = 20, before: str | None = None) -> MessagesPage:
        """Return the newest `limit` messages older than `before`, oldest first."""
        response = self._send("GET", api.messages_path(thread_id), params=api.messages_params(limit, before))
        return MessagesPage.model_validate(response.json())

    def delete_thread(self, thread_id: str) -> None:
        """Purge a thread (nothing happens for a thread that does not exist)."""
        self._send("DELETE", api.thread_path(thread_id))

    # The token's user -------------------------------------------------------------------

    def memory(self) -> UserMemory:
        """Return what the service remembers about the token's user."""
        return UserMemory.model_validate(self._send("GET", api.memory_path(self._user())).json())

    def reset_memory(self) -> None:
        """Forget the token's user's profile and facts."""
        self._send("DELETE", api.memory_path(self._user()))

    def forget_fact(self, fact_id: str) -> None:
        """Forget one of the token's user's facts (its `id` in `memory()`); 404 when there is no such fact."""
        self._send("DELETE", api.fact_path(self._user(), fact_id))

    def erase_user(self) -> ErasureReport:
        """Erase the token's user in its tenant: threads, memory and feedback."""
        return ErasureReport.model_validate(self._send("DELETE", api.user_path(self._user())).json())

    # Plumbing ---------------------------------------------------------------------------

    def _user(self) -> str:
        return self._user_id or user_of(self._token())

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        attempt = 0
        while True:
            request = self._http.build_request(
                method,
                path,
                json=json,
                params=params,
                headers={"Authorization": f"Bearer {self._token()}", **(headers or {})},
            )
            response = self._http.send(request, stream=stream)
            if response.is_success:
                return response
            response.read()
            response.close()
            wait = self._retries.delay(
                attempt, response.status_code, retry_after_seconds(response.headers.get("retry-after"))
            )
            if wait is None:
                raise error_from_response(response)
            self._sleep(wait)
            attempt += 1

    def _rejoin(self, follower: RunFollower) -> httpx.Response:
        assert follower.run_id is not None
        # `<run_id>:0` asks for the whole stream, as no header does.
        headers = {"Accept": api.SSE, "Last-Event-ID": follower.last_event_id or f"{follower.run_id}:0"}
        return self._send("GET", api.stream_path(follower.thread_id, follower.run_id), headers=headers, stream=True)

    def _follow(self, response: httpx.Response, follower: RunFollower) -> Iterator[Event]:
        resumes = self._resumes
        while True:
            broken: Exception | None = None
            try:
                for event in SSEDecoder().decode(response.iter_lines()):
                    if follower.admit(event):
                        yield event
                    if follower.finished:
                        return
            except httpx.TransportError as exc:  # the connection dropped mid-stream
                broken = exc
            finally:
                response.close()  # also when the consumer stops early: the run goes on without us
            if follower.run_id is None or resumes <= 0:
                raise StreamInterrupted(follower.thread_id, follower.run_id, follower.last_event_id) from broken
            resumes -= 1
            response = self._rejoin(follower)
