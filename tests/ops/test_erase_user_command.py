"""`chatbot erase-user` is the erasure endpoint's command-line twin."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_of_threads, rows_under_namespace
from tests.fixtures.tokens import auth


def test_erase_user_command_removes_the_users_threads_in_one_tenant(isolated_database_url: str) -> None:
    async def converse() -> None:
        async with running_app(isolated_database_url) as client:
            for tenant in ("acme", "globex"):
                response = await client.post(
                    "/v1/threads/t-" + tenant + "/runs",
                    headers=auth(tenant=tenant, user="cli-user"),
                    json={"message": {"content": "remember that I live in Yazd"}},
                )
                assert response.status_code == 200
            await services_of(client).memory.drain(5)

    asyncio.run(converse())
    env = {**os.environ, "CHATBOT_DATABASE_URL": isolated_database_url}
    done = subprocess.run(
        [sys.executable, "-m", "chatbot.cli", "erase-user", "--tenant", "acme", "--user", "cli-user"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-500:]
    # The profile, its sources and the fact.
    assert "threads_deleted=1" in done.stdout and "memory_items_deleted=3" in done.stdout
    # Every table keyed by thread or store prefix, as the catalogue lists them.
    assert set(rows_of_threads(isolated_database_url, ["t-acme"]).values()) == {0}
    assert rows_of_threads(isolated_database_url, ["t-globex"])["checkpoints"] > 0
    assert set(rows_under_namespace(isolated_database_url, ("acme", "user", "cli-user")).values()) == {0}
    assert rows_under_namespace(isolated_database_url, ("globex", "user", "cli-user"))["store"] == 3
