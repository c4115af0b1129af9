"""Typed dependencies: how a router reaches the services the lifespan built.

Handlers name what they need (`pool: PoolDep`, `runs: RunsDep`) instead of reading
`request.app.state` themselves, so a handler's signature says what it touches and a test
or a later refactor can swap one service without hunting for attribute reads.

The services of features (runs, run records, the memory writer) are named for the type
checker only: this module sits below the features, and a runtime import of them here
would make every router that takes a dependency import every other feature too.
FastAPI resolves these aliases by their `Depends`, never by the quoted type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer
from langgraph.store.postgres.aio import AsyncPostgresStore

from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool
from chatbot.db.saver import FencedPostgresSaver

if TYPE_CHECKING:
    from chatbot.memory.writer import MemoryWriter
    from chatbot.threads.rejoin import RunRecords
    from chatbot.threads.runs import RunService

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


def app_settings(request: Request) -> Settings:
    """Return the settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


def app_pool(request: Request) -> Pool:
    """Return the replica's connection pool."""
    pool: Pool = request.app.state.pool
    return pool


def app_locks(request: Request) -> Locks:
    """Return the replica's thread and user locks."""
    locks: Locks = request.app.state.locks
    return locks


def app_saver(request: Request) -> FencedPostgresSaver:
    """Return the checkpointer (its serializer reads transcripts and records)."""
    saver: FencedPostgresSaver = request.app.state.saver
    return saver


def app_store(request: Request) -> AsyncPostgresStore:
    """Return the long-term memory store."""
    store: AsyncPostgresStore = request.app.state.store
    return store


def app_runs(request: Request) -> RunService:
    """Return the run service."""
    runs: RunService = request.app.state.runs
    return runs


def app_run_records(request: Request) -> RunRecords:
    """Return the reader of runs' final checkpoints (rejoins and replays)."""
    records: RunRecords = request.app.state.run_records
    return records


def app_memory(request: Request) -> MemoryWriter:
    """Return the background memory writer."""
    memory: MemoryWriter = request.app.state.memory
    return memory


SettingsDep = Annotated[Settings, Depends(app_settings)]
PoolDep = Annotated[Pool, Depends(app_pool)]
LocksDep = Annotated[Locks, Depends(app_locks)]
SaverDep = Annotated[FencedPostgresSaver, Depends(app_saver)]
StoreDep = Annotated[AsyncPostgresStore, Depends(app_store)]
RunsDep = Annotated["RunService", Depends(app_runs)]
RecordsDep = Annotated["RunRecords", Depends(app_run_records)]
MemoryDep = Annotated["MemoryWriter", Depends(app_memory)]
