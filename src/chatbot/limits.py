"""Request limits: header size (431), body size (413), body read deadline (408), head deadline (close).

Bodies are read here, in full, before anything else sees them: a body over the limit gets
413 whether it was declared (`Content-Length`) or streamed (chunked), and a body that does
not arrive within the read deadline gets 408. Buffering costs at most 64 KiB per request,
and it is what lets the 413 come first: FastAPI turns any error raised while it reads a
body into a 400.

The request head (request line and headers) is guarded one level lower, in the HTTP
protocol (`HeadDeadlineH11Protocol`): uvicorn has no deadline for a head that never
completes, so a client sending one byte a minute would hold its connection forever.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from chatbot.config import MAX_BODY_BYTES
from chatbot.errors import problem_response

DEFAULT_READ_TIMEOUT_SECONDS = 10.0
MAX_HEADER_BYTES = 16 * 1024  # the whole header block; a service token is about 1 KiB


class _ClientGone(Exception):
    """The client disconnected before its body was complete."""


class BodySizeLimitMiddleware:
    """Read each request body in full: 413 past `limit` bytes, 408 past `read_timeout` seconds."""

    def __init__(
        self, app: ASGIApp, limit: int = MAX_BODY_BYTES, read_timeout: float = DEFAULT_READ_TIMEOUT_SECONDS
    ) -> None:
        self.app = app
        self.limit = limit
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Counted as on the wire (": " and CRLF per line), so many tiny headers count too.
        if sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ())) > MAX_HEADER_BYTES:
            # h11 bounds only a head that arrives in pieces; one sent whole is parsed at any size.
            await self._refuse(scope, receive, send, 431, f"request headers larger than {MAX_HEADER_BYTES // 1024} KiB")
            return
        if self._declared_too_large(scope):
            await self._refuse(scope, receive, send, 413, f"request body larger than {self.limit // 1024} KiB")
            return
        try:
            async with asyncio.timeout(self.read_timeout):
                body = await self._read_body(receive)
        except TimeoutError:
            await self._refuse(scope, receive, send, 408, "the request body did not arrive in time")
            return
        except _ClientGone:
            return  # nobody is left to answer
        if body is None:
            await self._refuse(scope, receive, send, 413, f"request body larger than {self.limit // 1024} KiB")
            return
        replayed = False

        async def replay() -> Message:
            # The app sees the whole body in one message; later calls (an SSE response
            # waiting for the client to go away) reach the server's own `receive`.
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _declared_too_large(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    return True
                if declared > self.limit or declared < 0:
                    return True
        return False

    async def _read_body(self, receive: Receive) -> bytes | None:
        """Return the whole body, or None once it passes the limit."""
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _ClientGone
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int, detail: str) -> None:
        # "Connection: close": the unread rest of the body must not be parsed as a next request.
        response = problem_response(status, detail, headers={"Connection": "close"})
        await response(scope, receive, send)


class HeadDeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head.

    The clock starts when the connection opens, or when the first byte of a later request
    on a kept-alive connection arrives (the idle wait before it is uvicorn's keep-alive
    timeout), and stops once the head is complete. A connection whose head misses it is
    closed. Pass it to uvicorn as `http=functools.partial(HeadDeadlineH11Protocol,
    head_timeout=...)`.
    """

    def __init__(self, *args: Any, head_timeout: float = DEFAULT_READ_TIMEOUT_SECONDS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout = head_timeout
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the head clock for the connection's first request."""
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        """Start the clock on a request's first byte; stop it once its head is complete."""
        if self._head_deadline is None and self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the head clock with the connection."""
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
