"""Typed dependencies: how a router reaches the services the lifespan built.

Handlers name what they need (`pool: PoolDep`, `runs: RunsDep`) instead of reading
`request.app.state` themselves, so a handler's signature says what it touches and a test
or a later refactor can swap one service without hunting for attribute reads.

This module sits below the features and names only what the lifespan builds from
infrastructure (settings, pool, locks, saver, store). A feature's own services have their
dependency beside them (`threads/deps.py`: runs and run records; `memory/deps.py`: the
memory writer), so no import here points up at a feature.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer
from langgraph.store.postgres.aio import AsyncPostgresStore

from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool
from chatbot.db.saver import FencedPostgresSaver

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

# Every dependency is `async def`, though none awaits: FastAPI runs a plain `def` one in a
# worker thread, a thread hop per dependency per request (a run asked for five).


async def app_settings(request: Request) -> Settings:
    """Return the settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


async def app_pool(request: Request) -> Pool:
    """Return the replica's connection pool."""
    pool: Pool = request.app.state.pool
    return pool


async def app_locks(request: Request) -> Locks:
    """Return the replica's thread and user locks."""
    locks: Locks = request.app.state.locks
    return locks


async def app_saver(request: Request) -> FencedPostgresSaver:
    """Return the checkpointer (its serializer reads transcripts and records)."""
    saver: FencedPostgresSaver = request.app.state.saver
    return saver


async def app_store(request: Request) -> AsyncPostgresStore:
    """Return the long-term memory store."""
    store: AsyncPostgresStore = request.app.state.store
    return store


SettingsDep = Annotated[Settings, Depends(app_settings)]
PoolDep = Annotated[Pool, Depends(app_pool)]
LocksDep = Annotated[Locks, Depends(app_locks)]
SaverDep = Annotated[FencedPostgresSaver, Depends(app_saver)]
StoreDep = Annotated[AsyncPostgresStore, Depends(app_store)]
