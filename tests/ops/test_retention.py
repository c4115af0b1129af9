"""Retention deletes idle threads only, and never one with a run in flight."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import psycopg

from chatbot.db.locks import Locks
from chatbot.db.pool import connection_kwargs
from chatbot.ids import ThreadId
from chatbot.ops.retention import purge_stale_threads
from tests.fixtures.app import running_app, services_of
from tests.fixtures.messages import send_for_events
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until, wait_until_sync


def _threads(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("select distinct thread_id from checkpoints").fetchall()}


async def test_retention_deletes_idle_threads_and_skips_busy_ones(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        for thread in ("old-1", "old-2", "busy"):
            await send_for_events(client, thread, "hello there")
        cutoff = datetime.now(UTC) + timedelta(seconds=1)  # everything so far counts as old
        await wait_until(lambda: datetime.now(UTC) > cutoff, what="the clock to pass the cut-off")
        await send_for_events(client, "fresh", "hello there")
        locks = Locks(isolated_database_url, connection_kwargs(settings_for(isolated_database_url)))
        busy = await locks.try_thread(ThreadId("busy"))  # a run in flight, from retention's point of view
        assert busy is not None
        try:
            pool = services_of(client).pool
            dry = await purge_stale_threads(pool, locks, cutoff, dry_run=True)
            assert (dry.stale, dry.deleted) == (3, 0)
            assert _threads(isolated_database_url) == {"old-1", "old-2", "busy", "fresh"}
            report = await purge_stale_threads(pool, locks, cutoff, batch_size=2)
        finally:
            await busy.release()
            await locks.close()
        assert (report.stale, report.deleted, report.skipped_in_flight) == (3, 2, 1)
        assert _threads(isolated_database_url) == {"busy", "fresh"}
        gone = await client.get("/v1/threads/old-1/messages", headers=auth())
        assert gone.status_code == 404


def _retention_command(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatbot.cli", "retention", *args],
        env={**os.environ, "CHATBOT_DATABASE_URL": url, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _make_threads(url: str, *threads: str) -> None:
    async with running_app(url) as client:
        for thread in threads:
            await send_for_events(client, thread, "hello there")


def wait_until_older(written: datetime, age: timedelta) -> None:
    """Wait until what was written by `written` is older than `age` (a checkpoint's age is its id's time)."""
    wait_until_sync(lambda: datetime.now(UTC) > written + age, what=f"the threads to be older than {age}")


def test_retention_command_dry_run_counts_and_changes_nothing(isolated_database_url: str) -> None:
    url = isolated_database_url
    asyncio.run(_make_threads(url, "dry-1", "dry-2"))
    done = _retention_command(url, "--older-than", "0", "--dry-run")
    assert done.returncode == 0, done.stderr[-500:]
    assert "stale=2 would delete=2" in done.stdout
    assert _threads(url) == {"dry-1", "dry-2"}


def test_retention_command_uses_the_setting_when_older_than_is_omitted(isolated_database_url: str) -> None:
    url = isolated_database_url
    asyncio.run(_make_threads(url, "set-1", "set-2"))
    written = datetime.now(UTC)  # after every checkpoint of both threads
    nothing_set = _retention_command(url)
    assert nothing_set.returncode == 2 and "CHATBOT_RETENTION_DAYS" in nothing_set.stderr
    a_year = _retention_command(url, CHATBOT_RETENTION_DAYS="365")
    assert a_year.returncode == 0 and "older_than_days=365 stale=0 deleted=0" in a_year.stdout
    assert _threads(url) == {"set-1", "set-2"}
    wait_until_older(written, timedelta(days=0.00001))  # older than the setting below (0.864 s)
    tiny = _retention_command(url, CHATBOT_RETENTION_DAYS="0.00001")
    assert tiny.returncode == 0, tiny.stderr[-500:]
    assert "stale=2 deleted=2" in tiny.stdout
    assert _threads(url) == set()


def _clone_thread(url: str, template: str, prefix: str, count: int) -> None:
    """Copy a thread's checkpoint rows to `count` threads named prefix-0.. (many threads, quickly)."""
    with psycopg.connect(url) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            columns = [
                r[0]
                for r in conn.execute(
                    "select column_name from information_schema.columns where table_name = %s "
                    "order by ordinal_position",
                    (table,),
                ).fetchall()
            ]
            chosen = ", ".join("%(prefix)s || g" if c == "thread_id" else c for c in columns)
            conn.execute(
                f"insert into {table} ({', '.join(columns)}) select {chosen} from {table}, "
                "generate_series(0, %(n)s - 1) g where thread_id = %(template)s",
                {"prefix": f"{prefix}-", "n": count, "template": template},
            )


def test_retention_command_deletes_more_threads_than_postgres_has_connections(isolated_database_url: str) -> None:
    url = isolated_database_url
    asyncio.run(_make_threads(url, "template"))
    written = datetime.now(UTC)  # the clones copy the template's checkpoint ids, and so its age
    with psycopg.connect(url) as conn:
        row = conn.execute("show max_connections").fetchone()
        assert row is not None
        many = int(row[0]) + 20  # a batch (200 by default) holding a lock connection per thread could not
    _clone_thread(url, "template", "many", min(many, 400))
    wait_until_older(written, timedelta(days=0.00001))
    done = _retention_command(url, "--older-than", "0.00001")
    assert done.returncode == 0, done.stderr[-500:]
    assert f"deleted={min(many, 400) + 1}" in done.stdout
    assert _threads(url) == set()
