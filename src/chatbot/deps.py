"""Typed dependencies: how a router reaches the services the lifespan built.

Handlers name what they need (`pool: PoolDep`, `runs: RunsDep`) instead of reading
`request.app.state` themselves, so a handler's signature says what it touches and a test
or a later refactor can swap one service without hunting for attribute reads.

The lifespan keeps one typed object, `chatbot.services.Services`, on `app.state.services`.
This module sits below the features (and below `services.py`), so it names the part it
reads as a protocol, `Infrastructure` (settings, pool, locks, saver, store). A feature's
own services have their dependency beside them (`threads/deps.py`: runs and run records;
`memory/deps.py`: the memory writer), read the same way, so no import here points up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer
from langgraph.store.postgres.aio import AsyncPostgresStore

from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool

# Documentation only: `ServiceAuthMiddleware` (auth.py) has verified the token before any
# `/v1/` route runs, so this scheme never refuses (`auto_error=False`); it is here so the
# OpenAPI document names the bearer token on every operation that needs one.
service_token = HTTPBearer(
    auto_error=False,
    scheme_name="serviceToken",
    bearerFormat="JWT",
    description="The main backend's service token: HS256 (or RS256) JWT with iss, aud, exp, iat, tenant_id, user_id.",
)
AUTHENTICATED = [Security(service_token)]


T = TypeVar("T")


def service(read: Callable[[Any], T]) -> Callable[[Request], Awaitable[T]]:
    """Return a dependency handing a handler `read(services)`: the one place `app.state` is read."""

    # `async def`, though it awaits nothing: FastAPI runs a plain `def` dependency in a
    # worker thread, a thread hop per dependency per request (a run asked for five).
    async def dependency(request: Request) -> T:
        return read(request.app.state.services)

    return dependency


class Infrastructure(Protocol):
    """The part of the replica's services (`chatbot.services.Services`) this module reads."""

    settings: Settings
    pool: Pool
    locks: Locks
    store: AsyncPostgresStore


def infrastructure(read: Callable[[Infrastructure], T]) -> Callable[[Request], Awaitable[T]]:
    """Return a dependency on one infrastructure service (`read` is checked against the protocol)."""
    return service(read)


SettingsDep = Annotated[Settings, Depends(infrastructure(lambda s: s.settings))]
PoolDep = Annotated[Pool, Depends(infrastructure(lambda s: s.pool))]
LocksDep = Annotated[Locks, Depends(infrastructure(lambda s: s.locks))]
StoreDep = Annotated[AsyncPostgresStore, Depends(infrastructure(lambda s: s.store))]
"""The long-term memory store."""
