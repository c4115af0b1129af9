"""The OpenAPI document's prose and error responses: what the backend team reads first.

Routers take their `responses=` from `problems(...)` and their examples from
`chatbot.api_examples`; the app takes `DESCRIPTION` and `TAGS`. Which statuses each
operation documents is decided here, from the contract (docs/api.md, the API as built), and
tests/api/test_openapi.py holds the same table, so a route that gains a status must
gain its documentation too.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, TypedDict

from pydantic import JsonValue

from chatbot.errors import DATABASE_UNAVAILABLE, PROBLEM_JSON
from chatbot.openapi_examples import Example
from chatbot.responses import ProblemDetails

DESCRIPTION = """\
The conversational agent of the insurance support chatbot. Its only caller is the
product's main backend, which owns users, sessions and the hand-off to a human assistant.
A **thread** is one conversation (`thread_id` is the backend's chat-session id); a
**run** is one user message answered by one execution of the agent. The first run on an
unseen `thread_id` creates the thread; there is no create endpoint.

## Authentication
Every `/v1/` call carries `Authorization: Bearer <JWT>`: HS256 with the shared service
secret, or RS256 when the service is configured with a public key. Required claims:
`iss`, `aud`, `exp`, `iat`, `tenant_id`, `user_id`; optional `locale` (BCP 47, default
`fa-IR`: Persian answers for `fa*`, English otherwise). The caller (tenant, user,
locale) comes from the token only, never from a body. A missing or invalid token gets
`401` with `WWW-Authenticate: Bearer`. A thread belongs to the tenant and user whose
run created it; anybody else gets `404`, exactly as if it did not exist. `/healthz`,
`/readyz` and `/metrics` need no token.

## Errors
Every error is an RFC 9457 problem document (`application/problem+json`:
`type`, `title`, `status`, `detail`), never a stack trace, SQL or message text. When
several checks fail, the first of this order answers: `413` body over 64 KiB (chunked
bodies too), `401` token, `422` request shape (unknown fields, `tenant_id`/`user_id` in a
body, a body that is not UTF-8 JSON, U+0000 or unpaired surrogates in text), `404`
another caller's thread, `429` rate limit or spending budget (`Retry-After` in whole
seconds; a budget's problem has `reason` `budget_exhausted`, or `model_unpriced` for a
model without a price under a budget in US dollars, and `budget`), `409` a run
in flight on the thread. `503` with `Retry-After` when Postgres is unreachable (within
3 seconds, on every endpoint that needs it) or when a replica already runs as many runs
as it may: retry, on any replica.

## Runs and their event stream
`POST /v1/threads/{thread_id}/runs` answers with a server-sent event stream
(`text/event-stream`, the default, also for `*/*` or no `Accept`) or, when `Accept`
prefers `application/json`, with the run's `end` object once it is over (`502` when the
model failed, `504` when it timed out, `503` when Postgres did).

Events, in order, each with `event:` and one-line JSON `data:`:
1. `metadata` `{"run_id", "thread_id"}`, always first;
2. `progress`, zero or more: retrieval progress, e.g. `{"stage": "retrieval", "chunks": 5}`;
3. `token`, zero or more: `{"content": "<text delta>"}`, whose concatenation is the answer;
4. `end`, exactly one and last: `{"run_id", "thread_id", "status", "message", "citations",
   "handoff_context"}`, `status` one of `answered`, `clarifying`, `escalate`;
   or, when the run fails after the stream began, one `error` event carrying a problem
   document, and the stream ends. The thread stays usable either way.

Every event has an `id: <run_id>:<offset>` line, `offset` being how many characters
(code points) of the answer the `token` events up to and including it delivered. While no
event is due, a comment line `: keep-alive` goes out at least every
`CHATBOT_SSE_KEEPALIVE_SECONDS` (default 10). The response carries
`Location: /v1/threads/{thread_id}/runs/{run_id}/stream`.

## Rejoining a stream
`GET /v1/threads/{thread_id}/runs/{run_id}/stream`, on any replica, with
`Last-Event-ID: <run_id>:<offset>` (the last `id:` received) sends `metadata`, the answer
from that offset on, then the same `end` (or `error`): the text received before and
after a rejoin concatenates to the final answer. A run in flight is followed to its end;
a finished run is replayed from its record.

## Reading the examples
The examples below leave out keys whose value is `null` (the document generator drops
them); the service always sends every key the schemas list, `null` included
(`"handoff_context": null`, `"next_before": null`). The event-stream examples show them.
"""

TAGS: list[dict[str, str]] = [
    {"name": "threads", "description": "Runs, their streams and records, transcripts, feedback, deletion."},
    {"name": "memory", "description": "What the service remembers about the calling user."},
    {"name": "users", "description": "Erasure of a user in the caller's tenant."},
    {"name": "operations", "description": "Liveness, readiness and metrics; no token needed."},
]

# Inlined rather than referenced: error bodies are `application/problem+json`, and FastAPI
# puts a response `model` under the route's own media type (`application/json`).
PROBLEM_SCHEMA: dict[str, JsonValue] = ProblemDetails.model_json_schema()

_RETRY_AFTER: JsonValue = {"description": "Whole seconds to wait before retrying.", "schema": {"type": "integer"}}

# status -> (description, example detail, headers): the reasons this service gives.
_PROBLEMS: dict[int, tuple[str, str, dict[str, JsonValue]]] = {
    401: (
        "Missing, malformed, expired or otherwise invalid service token.",
        "invalid token",
        {"WWW-Authenticate": {"description": "Always `Bearer`.", "schema": {"type": "string"}}},
    ),
    403: ("The path names another user than the token's.", "a token may only read or change its own user's data", {}),
    404: (
        "The thread (or run) does not exist, or belongs to another caller: the two are indistinguishable.",
        "thread not found",
        {},
    ),
    408: (
        "The request body did not arrive within `CHATBOT_REQUEST_READ_TIMEOUT_SECONDS` of the request head.",
        "request body not received in time",
        {},
    ),
    409: ("A run is in flight on this thread (never queued).", "a run is already in flight on this thread", {}),
    413: ("The request body is larger than 64 KiB (declared or chunked).", "request body larger than 64 KiB", {}),
    422: (
        "Request shape: an invalid path, query, header or body; unknown fields (`tenant_id`, `user_id` too);"
        " a body that is not UTF-8 JSON; U+0000 or unpaired surrogates in text.",
        "message.content: Value error, must not be empty",
        {},
    ),
    431: ("The request headers are larger than 16 KiB.", "request headers too large", {}),
    429: (
        "The user's rate limit of runs per minute is exceeded; or a budget of model spending does not fit the"
        " run's answer: then `reason` is `budget_exhausted` (or `model_unpriced`: a model of the chain has no"
        ' price under a budget in US dollars) and `budget` is `{"scope": "tenant" | "user",'
        ' "period": "day" | "month"}`, `Retry-After` the seconds until that period resets.',
        "rate limit exceeded",
        {"Retry-After": _RETRY_AFTER},
    ),
    502: ("JSON mode: the model failed to answer.", "the model failed to answer", {}),
    503: (
        "Postgres is unreachable, or the replica already runs as many runs as it may: retry after `Retry-After`.",
        DATABASE_UNAVAILABLE,
        {"Retry-After": _RETRY_AFTER},
    ),
    504: ("JSON mode: the model did not answer in time.", "the model did not answer in time", {}),
}

# Statuses every `/v1/` operation can answer: the read deadline (408), the body and header
# limits (413, 431) and the token (401) come before any route, every route validates its
# path (422), and every route needs Postgres (503).
V1_STATUSES = (401, 408, 413, 422, 431, 503)


# A `responses=` entry of a route: OpenAPI's response object (JSON), and FastAPI's `model`
# key beside it where the answer has a schema (json_answer).
Responses = dict[int | str, dict[str, Any]]


class RouteDocs(TypedDict, total=False):
    """A route decorator's keywords documenting its answers (spread with `**`)."""

    status_code: int
    response_model: None
    responses: Responses


def problem_example(status: int, detail: str) -> JsonValue:
    """Return a problem document as the service would send it."""
    return ProblemDetails(title=HTTPStatus(status).phrase, status=status, detail=detail).model_dump()


def problems(*statuses: int) -> Responses:
    """Return the `responses=` entries documenting these problem statuses."""
    documented: Responses = {}
    for status in sorted(set(statuses)):
        description, detail, headers = _PROBLEMS[status]
        entry: dict[str, JsonValue] = {
            "description": description,
            "content": {
                PROBLEM_JSON: {
                    "schema": PROBLEM_SCHEMA,
                    "example": problem_example(status, detail),
                }
            },
        }
        if headers:
            entry["headers"] = headers
        documented[status] = entry
    return documented


def v1_problems(*statuses: int) -> Responses:
    """Return the problem responses of a `/v1/` operation: the common ones and `statuses`."""
    return problems(*V1_STATUSES, *statuses)


def json_answer(examples: dict[str, Example], *statuses: int) -> Responses:
    """Return the 200 JSON answer of a `/v1/` operation (its route's `response_model`), then its problems."""
    answer: dict[str, Any] = {"content": {"application/json": {"examples": examples}}}
    return {200: answer, **v1_problems(*statuses)}


def no_content(description: str, *statuses: int) -> RouteDocs:
    """Return a route's keywords for an operation answering 204 (`description`), with its problems."""
    return {"status_code": 204, "responses": {204: {"description": description}, **v1_problems(*statuses)}}


SSE_MEDIA = "text/event-stream"

# The event stream is text: one `id:`, `event:` and `data:` line per event, a blank line
# after each, and `: keep-alive` comment lines while no event is due.
SSE_SCHEMA: dict[str, JsonValue] = {
    "type": "string",
    "description": "Server-sent events: `metadata`, `progress`*, `token`*, then `end` or `error`; "
    "each with `id: <run_id>:<offset>`; `: keep-alive` comments in between.",
}

STREAM_HEADERS: dict[str, JsonValue] = {
    "Location": {
        "description": "Where the run's stream can be rejoined: `/v1/threads/{thread_id}/runs/{run_id}/stream`.",
        "schema": {"type": "string"},
    },
    "Cache-Control": {"description": "`no-cache` on event streams.", "schema": {"type": "string"}},
}
