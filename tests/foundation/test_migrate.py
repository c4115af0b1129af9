"""`chatbot migrate`: concurrent, idempotent; the server refuses to be ready before it."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg

from tests.fixtures.app import running_app

EXPECTED_TABLES = {
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_migrations",
    "store",
    "store_migrations",
    "chatbot_schema_migrations",
    "run_feedback",
    "run_rate_windows",
    "kb_documents",
    "kb_chunks",
}


def _migrate_process(url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CHATBOT_DATABASE_URL": url}
    return subprocess.Popen(
        [sys.executable, "-m", "chatbot.cli", "migrate"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("select tablename from pg_tables where schemaname = 'public'").fetchall()
    return {r[0] for r in rows}


def test_four_concurrent_migrations_all_succeed_and_leave_one_schema(fresh_database_url: str) -> None:
    processes = [_migrate_process(fresh_database_url) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in processes]
    codes = [p.returncode for p in processes]
    assert codes == [0, 0, 0, 0], [err.decode()[-500:] for _, err in results]
    assert EXPECTED_TABLES <= _tables(fresh_database_url)
    with psycopg.connect(fresh_database_url) as conn:
        versions = conn.execute("select v from checkpoint_migrations order by v").fetchall()
        own = conn.execute("select version from chatbot_schema_migrations order by version").fetchall()
    assert [v[0] for v in versions] == list(range(len(versions)))  # each applied exactly once
    assert len(own) == len({v[0] for v in own})
    # Idempotent: a fifth run applies nothing and succeeds.
    again = _migrate_process(fresh_database_url)
    out, _ = again.communicate(timeout=60)
    assert again.returncode == 0
    assert b"already up to date" in out


async def test_readyz_refuses_an_unmigrated_database_and_says_what_to_run(fresh_database_url: str) -> None:
    async with running_app(fresh_database_url) as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert health.status_code == 200
    assert ready.status_code == 503
    assert ready.headers["content-type"].startswith("application/problem+json")
    assert "chatbot migrate" in ready.json()["detail"]
    assert _tables(fresh_database_url) == set()  # the server issued no DDL


async def test_readyz_reports_an_unreachable_database(tmp_path: object) -> None:
    url = f"postgresql://nobody@/nowhere?host={tmp_path}&connect_timeout=1"
    async with running_app(url) as client:
        assert (await client.get("/healthz")).status_code == 200
        response = await client.get("/readyz")
    assert response.status_code == 503
    assert isinstance(response.json()["detail"], str)
