"""Handlers name the services they use (chatbot.deps); none reaches into `app.state` itself."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute

from chatbot.app import create_app
from tests.fixtures.postgres import settings_for


def _routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    # FastAPI keeps included routers as routers (`original_router`), not as flattened routes.
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from _routes(route.original_router.routes)


def test_no_handler_takes_the_request_to_read_the_app_state() -> None:
    app = create_app(settings_for("postgresql://127.0.0.1:1/unused"))
    handlers = [r.endpoint for r in _routes(app.routes) if r.endpoint.__module__.startswith("chatbot")]
    assert len(handlers) >= 12
    for handler in handlers:
        parameters = inspect.signature(handler, eval_str=True).parameters.values()
        assert not any(p.annotation is Request for p in parameters), handler.__qualname__
        assert "app.state" not in inspect.getsource(handler), handler.__qualname__
