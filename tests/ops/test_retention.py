"""Retention deletes idle threads only, and never one with a run in flight."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import psycopg

from chatbot.db.pool import connection_kwargs
from chatbot.ops.retention import purge_stale_threads
from chatbot.threads.locks import Locks
from tests.fixtures.app import running_app
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import auth


def _threads(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("select distinct thread_id from checkpoints").fetchall()}


async def _turn(client: object, thread: str) -> None:
    response = await client.post(
        f"/v1/threads/{thread}/runs",
        json={"message": {"content": "hello there"}},  # type: ignore[attr-defined]
        headers=auth(),
    )
    assert response.status_code == 200


async def test_retention_deletes_idle_threads_and_skips_busy_ones(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        for thread in ("old-1", "old-2", "busy"):
            await _turn(client, thread)
        cutoff = datetime.now(UTC) + timedelta(seconds=1)  # everything so far counts as old
        await asyncio.sleep(1.2)
        await _turn(client, "fresh")
        locks = Locks(isolated_database_url, connection_kwargs(settings_for(isolated_database_url)))
        busy = await locks.try_thread("busy")  # a run in flight, from retention's point of view
        assert busy is not None
        try:
            pool = client.app.state.pool  # type: ignore[attr-defined]
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


def test_retention_command_dry_run_changes_nothing(migrated_database_url: str) -> None:
    env = {**os.environ, "CHATBOT_DATABASE_URL": migrated_database_url}
    before = _threads(migrated_database_url)
    done = subprocess.run(
        [sys.executable, "-m", "chatbot.cli", "retention", "--older-than", "0", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert "stale=" in done.stdout
    assert _threads(migrated_database_url) == before
