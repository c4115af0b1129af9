"""What the sync and asyncio clients share besides the API's paths (api.py): the options,
the token, the caller's user, when a refused request is retried and how a stream is rejoined.

Private to `chatbot.client`: each client adds its own httpx client, its own sleep and the
loops that must be written once for `def` and once for `async def`.
"""

from __future__ import annotations

from typing import Any, TypedDict

import httpx

from chatbot.client import api
from chatbot.client.errors import StreamInterrupted, error_from_response, retry_after_seconds
from chatbot.client.events import RunFollower
from chatbot.client.tokens import TokenSource, token_source, user_of

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)  # reads: the service sends a keep-alive every 10 s
# Idle connections are dropped before the service closes them (CHATBOT_KEEP_ALIVE_SECONDS,
# default 5): with both at 5 s a request sent as the service hangs up gets no answer
# (the soak met it once in 22,734 requests).
DEFAULT_LIMITS = httpx.Limits(keepalive_expiry=2.0)


class ClientOptions(TypedDict, total=False):
    """The keyword options of both clients; `ChatbotClient` says what each does."""

    secret: str | None
    tenant_id: str | None
    user_id: str | None
    locale: str | None
    issuer: str
    audience: str
    timeout: float | httpx.Timeout
    retries: api.Retries | None
    resumes: int


class RequestParts(TypedDict, total=False):
    """What a request carries besides its method and path."""

    json: Any
    params: dict[str, str | int] | None
    headers: dict[str, str] | None


class ClientCore:
    """The token, the user, the retry and resume rules: the part of a client that does no I/O."""

    def __init__(
        self,
        token: TokenSource | None,
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
    ) -> None:
        self._token = token_source(
            token, secret=secret, tenant_id=tenant_id, user_id=user_id, locale=locale, issuer=issuer, audience=audience
        )
        self._user_id = user_id
        self._timeout = timeout
        self._retries = retries or api.Retries()
        self._resumes = resumes

    def _user(self) -> str:
        return self._user_id or user_of(self._token())

    def _request(
        self, http: httpx.Client | httpx.AsyncClient, method: str, path: str, parts: RequestParts
    ) -> httpx.Request:
        """Return the request, carrying the caller's token (minted anew when it is a callable)."""
        headers = {"Authorization": f"Bearer {self._token()}", **(parts.get("headers") or {})}
        return http.build_request(method, path, json=parts.get("json"), params=parts.get("params"), headers=headers)

    def _resumes_after(self, follower: RunFollower, resumes: int, broken: Exception | None) -> int:
        """Return the resumes left once this broken stream is rejoined; raise `StreamInterrupted` if it may not be."""
        if follower.run_id is None or resumes <= 0:
            raise StreamInterrupted(follower.thread_id, follower.run_id, follower.last_event_id) from broken
        return resumes - 1

    def _wait_before_retry(self, response: httpx.Response, attempt: int) -> float:
        """Return how long to wait before retrying a refused request; raise its error when it is not retried."""
        wait = self._retries.delay(
            attempt, response.status_code, retry_after_seconds(response.headers.get("retry-after"))
        )
        if wait is None:
            raise error_from_response(response)
        return wait


def rejoin_request(follower: RunFollower) -> tuple[str, dict[str, str]]:
    """Return the path and headers that rejoin the followed run's stream after its last event."""
    assert follower.run_id is not None
    # `<run_id>:0` asks for the whole stream, as no header does.
    headers = {"Accept": api.SSE, "Last-Event-ID": follower.last_event_id or f"{follower.run_id}:0"}
    return api.stream_path(follower.thread_id, follower.run_id), headers
