"""RFC 9457 problem details for every error the service answers with.

Bodies carry a short, fixed reason: never a stack trace, SQL, token or message content.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from pydantic import JsonValue
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
# Seconds a caller is asked to wait after a 503: the pool retries connections meanwhile.
DATABASE_RETRY_AFTER_SECONDS = 2
DATABASE_UNAVAILABLE = "the database is unavailable"
"""The detail of every 503 that means Postgres could not be reached or lost a run's lock."""
DATABASE_ERRORS = (psycopg.OperationalError, PoolTimeout)
"""What Postgres being unreachable raises (a lost or refused connection, a pool that could not
hand one out in time): the one list code that maps a database error itself catches."""


class Problem(Exception):
    """An error that becomes a problem-details response."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str | None = None,
        headers: Mapping[str, str] | None = None,
        members: Mapping[str, JsonValue] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or HTTPStatus(status).phrase
        self.headers = dict(headers or {})
        self.members = dict(members or {})
        """Extension members of the problem object (`reason`, `budget`), beside the standard ones."""

    def body(self) -> dict[str, JsonValue]:
        """Return the problem-details object."""
        return problem_body(self.status, self.detail, self.title) | self.members


def problem_body(status: int, detail: str, title: str | None = None) -> dict[str, JsonValue]:
    """Return a problem-details object for `status`."""
    return {
        "type": "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }


def problem_response(
    status: int, detail: str, *, title: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """Return a problem-details JSON response."""
    return JSONResponse(
        problem_body(status, detail, title), status_code=status, media_type=PROBLEM_JSON, headers=headers
    )


def unauthorized(reason: str) -> Problem:
    """Return the 401 every token failure answers with."""
    return Problem(401, reason, headers={"WWW-Authenticate": "Bearer"})


def database_problem() -> Problem:
    """Return the 503 of a Postgres that cannot be reached: the one mapping of a database error.

    The handler of `DATABASE_ERRORS` below answers with it; code that must catch one itself
    (the run path, which frees its lock and reservation first) raises it.
    """
    return Problem(503, DATABASE_UNAVAILABLE, headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)})


def _problem_response(problem: Problem) -> JSONResponse:
    return JSONResponse(problem.body(), status_code=problem.status, media_type=PROBLEM_JSON, headers=problem.headers)


def _describe_validation(exc: RequestValidationError) -> str:
    # Name the fields and what is wrong with them, never the values sent.
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        message = str(error.get("msg", "invalid"))
        if error.get("type") == "extra_forbidden":
            message = "unknown field"
        elif error.get("type") == "json_invalid":
            # The decoder's own reason ("Expecting value", "duplicate key in an object"): no text of the body.
            where, message = "body", f"not valid UTF-8 JSON: {(error.get('ctx') or {}).get('error', 'malformed')}"
        parts.append(f"{where}: {message}")
    return "; ".join(parts) or "invalid request"


def install_problem_handlers(app: FastAPI) -> None:
    """Make every error of `app` a problem-details response (chatbot.openapi documents them)."""

    @app.exception_handler(Problem)
    async def _problem(_: Request, exc: Problem) -> JSONResponse:
        return _problem_response(exc)

    # One mapping for every endpoint: a lost connection, a refused connect, a pool that
    # could not hand out a connection within its (short) timeout, an admin shutdown. All
    # of them are psycopg.OperationalError, psycopg_pool's PoolTimeout and PoolClosed too.
    @app.exception_handler(psycopg.OperationalError)
    async def _database(request: Request, exc: psycopg.OperationalError) -> JSONResponse:
        log.warning("database unavailable", extra={"path": request.url.path, "error": type(exc).__name__})
        return _problem_response(database_problem())

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(422, _describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI answers 400 when it cannot decode the body at all (invalid UTF-8, JSON
            # nested too deep, a number too long to convert): the contract calls any body
            # that is not valid UTF-8 JSON a request-shape error.
            return problem_response(422, "the request body is not valid UTF-8 JSON")
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        return problem_response(exc.status_code, detail, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error", extra={"path": request.url.path, "error": type(exc).__name__})
        return problem_response(500, "internal error")
