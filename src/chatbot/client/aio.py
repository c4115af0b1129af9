"""`AsyncChatbotClient`: the service's API for asyncio callers, over httpx."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
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


class AsyncChatbotClient(ClientCore):
    """Call the conversational agent service from asyncio code; the twin of `ChatbotClient`.

    It takes the same options (`ChatbotClient` says what each does); `transport` is an
    `httpx.AsyncBaseTransport` and `sleep` a coroutine function.
    """

    def __init__(
        self,
        base_url: str,
        token: TokenSource | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(token, **options)
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=self._timeout, transport=transport, limits=DEFAULT_LIMITS
        )

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncChatbotClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    # Runs -------------------------------------------------------------------------------

    async def run(self, thread_id: str, content: str) -> RunEnd:
        """Send one message and return the run's `end` (a failed run raises its problem)."""
        async for event in self.stream(thread_id, content):
            if event.event == "end":
                return event.end()
            if event.event == "error":
                raise error_from_event(event.data)
        raise AssertionError("unreachable: a stream ends with end or error, or raises")

    async def stream(self, thread_id: str, content: str) -> AsyncIterator[Event]:
        """Send one message and yield the run's events as they arrive, `metadata` to `end` or `error`.

        A stream that breaks after `metadata` is rejoined (`resumes` times, once by default)
        from the last event received, and continues without a repeated or missing token.
        """
        follower = RunFollower(thread_id)
        response = await self._send(
            "POST", api.runs_path(thread_id), json=api.run_body(content), headers={"Accept": api.SSE}, stream=True
        )
        async for event in self._follow(response, follower):
            yield event

    async def join(self, thread_id: str, run_id: str, last_event_id: str | None = None) -> AsyncIterator[Event]:
        """Rejoin a run's stream (after `last_event_id`, or from its start) and follow it to its end."""
        follower = RunFollower.joining(thread_id, run_id, last_event_id)
        async for event in self._follow(await self._rejoin(follower), follower):
            yield event

    async def run_record(self, thread_id: str, run_id: str) -> RunRecord:
        """Return what the agent saw and said in one run."""
        return RunRecord.model_validate((await self._send("GET", api.run_path(thread_id, run_id))).json())

    async def feedback(
        self, thread_id: str, run_id: str, score: Literal["up", "down"], comment: str | None = None
    ) -> None:
        """Rate a run's answer (sending again replaces the earlier rating)."""
        await self._send("POST", api.feedback_path(thread_id, run_id), json=api.feedback_body(score, comment))

    async def cancel(self, thread_id: str, run_id: str) -> None:
        """Stop a run in flight ("stop generating"); its stream ends with the `cancelled` error.

        Returns once the thread takes a new message. Raises `ConflictError` (409) when the run
        had already ended.
        """
        await self._send("POST", api.cancel_path(thread_id, run_id))

    # Threads ----------------------------------------------------------------------------

    async def messages(self, thread_id: str, limit: int = 20, before: str | None = None) -> MessagesPage:
        """Return the newest `limit` messages older than `before`, oldest first."""
        response = await self._send("GET", api.messages_path(thread_id), params=api.messages_params(limit, before))
        return MessagesPage.model_validate(response.json())

    async def delete_thread(self, thread_id: str) -> None:
        """Purge a thread (nothing happens for a thread that does not exist)."""
        await self._send("DELETE", api.thread_path(thread_id))

    # The token's user -------------------------------------------------------------------

    async def memory(self) -> UserMemory:
        """Return what the service remembers about the token's user."""
        return UserMemory.model_validate((await self._send("GET", api.memory_path(self._user()))).json())

    async def reset_memory(self) -> None:
        """Forget the token's user's profile and facts."""
        await self._send("DELETE", api.memory_path(self._user()))

    async def forget_fact(self, fact_id: str) -> None:
        """Forget one of the token's user's facts (its `id` in `memory()`); 404 when there is no such fact."""
        await self._send("DELETE", api.fact_path(self._user(), fact_id))

    async def erase_user(self) -> ErasureReport:
        """Erase the token's user in its tenant: threads, memory and feedback."""
        return ErasureReport.model_validate((await self._send("DELETE", api.user_path(self._user()))).json())

    # Plumbing ---------------------------------------------------------------------------

    async def _send(
        self, method: str, path: str, *, stream: bool = False, **parts: Unpack[RequestParts]
    ) -> httpx.Response:
        attempt = 0
        while True:
            response = await self._http.send(self._request(self._http, method, path, parts), stream=stream)
            if response.is_success:
                return response
            await response.aread()
            await response.aclose()
            await self._sleep(self._wait_before_retry(response, attempt))
            attempt += 1

    async def _rejoin(self, follower: RunFollower) -> httpx.Response:
        path, headers = rejoin_request(follower)
        return await self._send("GET", path, headers=headers, stream=True)

    async def _follow(self, response: httpx.Response, follower: RunFollower) -> AsyncIterator[Event]:
        resumes = self._resumes
        while True:
            broken: Exception | None = None
            try:
                decoder = SSEDecoder()
                async for line in response.aiter_lines():
                    event = decoder.feed(line)
                    if event is None:
                        continue
                    if follower.admit(event):
                        yield event
                    if follower.finished:
                        return
            except httpx.TransportError as exc:  # the connection dropped mid-stream
                broken = exc
            finally:
                await response.aclose()  # also when the consumer stops early: the run goes on without us
            resumes = self._resumes_after(follower, resumes, broken)
            response = await self._rejoin(follower)
