"""Request bodies are UTF-8 JSON, strictly: no other encoding, no repeated keys.

FastAPI hands the body bytes to `json.loads`, which guesses UTF-16 and UTF-32 from the
first bytes and lets the last of two equal keys win. A UTF-16 body (even one labelled
`charset=utf-8`) was therefore accepted and stored, and `{"score": "down", "score": "up"}`
recorded whichever came last: a client bug answered as a success. The contract calls any
body that is not valid UTF-8 JSON a request-shape error (422).

Routes with a JSON body use `StrictJsonRoute` (threads/runs_router.py;
a test walks the app's routes so a new body route cannot miss it). It decodes the body as
UTF-8 (a leading byte-order mark is allowed, as RFC 8259 permits a parser to ignore it) and
parses it once, refusing duplicate keys at any depth and the non-JSON constants `NaN` and
`Infinity`. Its errors are `json.JSONDecodeError`, which FastAPI turns into a 422 naming
the position, never the text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import JsonValue


class _Refused(json.JSONDecodeError):
    """A body that decodes but is not one JSON reading: FastAPI answers it like malformed JSON."""


def _object_without_repeats(pairs: list[tuple[str, JsonValue]]) -> dict[str, JsonValue]:
    result = dict(pairs)
    if len(result) != len(pairs):
        # The key is the caller's text: named by position in the document only.
        raise _Refused("duplicate key in an object", "", 0)
    return result


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON", "", 0)


def parse_json_body(body: bytes) -> Any:
    """Return the JSON value of a UTF-8 request body; raise `json.JSONDecodeError` for anything else."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _Refused("the body is not UTF-8", "", exc.start) from None
    return json.loads(text, object_pairs_hook=_object_without_repeats, parse_constant=_no_constant)


class StrictJsonRequest(Request):
    """A request whose `json()` is `parse_json_body` (cached like Starlette's)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json_body(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """An API route that reads its JSON body with `StrictJsonRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler
