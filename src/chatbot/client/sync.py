"""`ChatbotClient`: the service's API for synchronous callers, over httpx."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Literal, Unpack

import httpx

from chatbot.client import api
from chatbot.client._core import (
    DEFAULT_LIMITS,
    ClientCore,
    ClientOptions,
    RequestParts,
    rejoin_request,
)
from chatbot.client.errors import error_from_event
from chatbot.client.events import Event, RunFollower, SSEDecoder
from chatbot.client.tokens import TokenSource
from chatbot.responses import ErasureReport, MessagesPage, RunEnd, RunRecord, UserMemory


class ChatbotClient(ClientCore):
    """Call the conversational agent service: runs, streams, transcripts, feedback, memory, erasure.

    Construct it with `token` (a string, or a callable returning one per request) or with
    `secret`, `tenant_id`, `user_id` and `locale` (and `issuer`, `audience`) to mint HS256
    service tokens here. Problem answers raise `ChatbotError` (`ConflictError` for 409,
    `RateLimitedError` for 429); 429 and 503 are retried as `retries` says, 409 never. A
    broken stream is rejoined `resumes` times (once by default). `timeout` bounds each read
    (30 s; the service sends a keep-alive every 10 s); `transport` and `sleep` are for tests.
    """

    def __init__(
        self,
        base_url: str,
        token: TokenSource | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(token, **options)
        self._sleep = sleep
        self._http = httpx.Client(base_url=base_url, timeout=self._timeout, transport=transport, limits=DEFAULT_LIMITS)

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

    def _send(self, method: str, path: str, *, stream: bool = False, **parts: Unpack[RequestParts]) -> httpx.Response:
        attempt = 0
        while True:
            response = self._http.send(self._request(self._http, method, path, parts), stream=stream)
            if response.is_success:
                return response
            response.read()
            response.close()
            self._sleep(self._wait_before_retry(response, attempt))
            attempt += 1

    def _rejoin(self, follower: RunFollower) -> httpx.Response:
        path, headers = rejoin_request(follower)
        return self._send("GET", path, headers=headers, stream=True)

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
            resumes = self._resumes_after(follower, resumes, broken)
            response = self._rejoin(follower)
