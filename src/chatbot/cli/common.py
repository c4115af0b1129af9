"""Helpers shared by the command-line tools."""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import jwt
import typer
from pydantic import ValidationError

from chatbot.caller import CALLER_ID_RULE, is_caller_id
from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool, connection_kwargs, open_pool, resolve_database_url
from chatbot.ids import TenantId, UserId

T = TypeVar("T")
DEV_SECRET_FILE = "dev-secret"


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment, exiting with the reason when they are unsafe."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        for error in exc.errors():
            typer.echo(f"configuration error: {error['msg'].removeprefix('Value error, ')}", err=True)
        raise typer.Exit(2) from None


def caller_id(value: str) -> str:
    """Option callback for `--tenant` and `--user`: refuse an id no service token can carry (exit 2).

    The token's rule (caller.py), the whole string: an erasure of "u1\n" or "u.1" would
    otherwise report success and erase nothing, and an ingest under such a tenant would store
    chunks no caller can reach.
    """
    if not is_caller_id(value):
        raise typer.BadParameter(f"{value!r} is not a tenant or user id: must be {CALLER_ID_RULE}")
    return value


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from a synchronous command."""
    return asyncio.run(coro)


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Within the running loop: SIGTERM cancels the current task as Ctrl-C does, so its clean-up runs.

    Without it SIGTERM ends the process at once, and what the command holds in Postgres (a
    budget's holds) is left to expire.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # called from a coroutine
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def dev_secret(data_dir: Path) -> str:
    """Return the dev secret kept under the data dir, creating it on first use."""
    path = data_dir / DEV_SECRET_FILE
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(48)
    path.write_text(secret + "\n")
    path.chmod(0o600)
    return secret


def mint_token(settings: Settings, *, tenant: TenantId, user: UserId, locale: str, ttl: int) -> str:
    """Sign a service token with the configured HS256 secret."""
    if settings.service_secret is None:
        typer.echo(
            "no CHATBOT_SERVICE_SECRET set: cannot sign tokens (RS256 tokens are signed by the backend)", err=True
        )
        raise typer.Exit(2)
    now = int(time.time())
    claims = {
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "iat": now,
        "exp": now + ttl,
        "tenant_id": tenant,
        "user_id": user,
        "locale": locale,
    }
    return jwt.encode(claims, settings.service_secret.get_secret_value(), algorithm="HS256")


@asynccontextmanager
async def open_pool_and_locks(settings: Settings) -> AsyncIterator[tuple[Pool, Locks]]:
    """Open a small main pool and one lock session for a maintenance command."""
    url = await resolve_database_url(settings)
    async with open_pool(settings.model_copy(update={"database_url": url})) as pool:
        locks = Locks(settings.lock_database_url or url, connection_kwargs(settings), sessions=1)
        try:
            yield pool, locks
        finally:
            await locks.close()


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error and exit."""
    print(message, file=sys.stderr)
    raise typer.Exit(code)
