"""The app's OpenAPI document and what the contract says each operation can answer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from chatbot.app import create_app
from tests.fixtures.postgres import settings_for

# Every /v1/ operation can answer these: the read deadline (408), the body and header limits
# (413, 431) and the token (401) come before any route, every route validates its path (422),
# every route needs Postgres (503).
V1 = frozenset({401, 408, 413, 422, 431, 503})


@dataclass(frozen=True)
class Expected:
    """What the contract says an operation answers (docs/api.md, the API as built)."""

    success: int
    errors: frozenset[int]
    persian: bool  # its bodies carry the user's text, so Persian examples are due


# (method, path) -> what it may answer. Derived from the contract's Errors and Endpoints
# sections and the code (threads/*, memory/router.py, ops/router.py, health.py).
OPERATIONS: dict[tuple[str, str], Expected] = {
    ("post", "/v1/threads/{thread_id}/runs"): Expected(200, V1 | {404, 409, 429, 502, 504}, True),
    ("get", "/v1/threads/{thread_id}/runs/{run_id}/stream"): Expected(200, V1 | {404}, True),
    ("get", "/v1/threads/{thread_id}/runs/{run_id}"): Expected(200, V1 | {404}, True),
    ("post", "/v1/threads/{thread_id}/runs/{run_id}/cancel"): Expected(202, V1 | {404, 409}, False),
    ("get", "/v1/threads/{thread_id}/messages"): Expected(200, V1 | {404}, True),
    ("delete", "/v1/threads/{thread_id}"): Expected(204, V1 | {409}, False),
    ("post", "/v1/threads/{thread_id}/runs/{run_id}/feedback"): Expected(204, V1 | {404}, True),
    ("get", "/v1/users/{user_id}/memory"): Expected(200, V1 | {403}, True),
    ("delete", "/v1/users/{user_id}/memory"): Expected(204, V1 | {403}, False),
    ("delete", "/v1/users/{user_id}/memory/facts/{fact_id}"): Expected(204, V1 | {403, 404}, False),
    ("delete", "/v1/users/{user_id}"): Expected(200, V1 | {403, 409}, False),
    ("get", "/healthz"): Expected(200, frozenset(), False),
    ("get", "/readyz"): Expected(200, frozenset({503}), False),
    ("get", "/metrics"): Expected(200, frozenset(), False),
}

METHODS = ("get", "post", "put", "patch", "delete")
_PERSIAN = re.compile("[\u0600-\u06ff]")


def openapi_document() -> dict[str, Any]:
    """Return the document an app builds (nothing touches the database for it)."""
    app = create_app(settings_for("postgresql://127.0.0.1:1/unused"))
    return app.openapi()


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield (method, path, operation) for every operation of the document."""
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method, path, operation


def examples_of(media: dict[str, Any]) -> list[Any]:
    """Return the example values of one media type (`example` and `examples`)."""
    found = [media["example"]] if "example" in media else []
    found += [e["value"] for e in media.get("examples", {}).values()]
    return found


def is_persian(value: Any) -> bool:
    """Return True when a value holds Persian script."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return bool(_PERSIAN.search(text))
