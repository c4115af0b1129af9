"""`chatbot chat` shows each remembered fact's id on `/memory`, and `/forget ID` forgets that one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from chatbot.client import ChatbotClient
from tests.cli.test_chat import chat_command, chat_env
from tests.fixtures.app import Replica
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.wait import wait_until_sync


def _chat(replica: Replica, tmp_path: Path, *lines: str) -> str:
    done = subprocess.run(
        chat_command(replica, "u-forget", "cli-forget", "en-US"),
        input="\n".join([*lines, ""]),
        capture_output=True,
        text=True,
        env=chat_env(tmp_path),
        timeout=60,
        check=True,
    )
    return done.stdout


def test_memory_shows_fact_ids_and_forget_removes_one(kb_replica: Replica, tmp_path: Path) -> None:
    _chat(kb_replica, tmp_path, "remember that my car is a Peugeot 206", "remember that I live in Yazd")
    with ChatbotClient(kb_replica.base_url, secret=TEST_SECRET, tenant_id="acme", user_id="u-forget") as client:
        wait_until_sync(lambda: len(client.memory().facts) == 2, what="both facts remembered", timeout=10)
        car = next(f for f in client.memory().facts if "Peugeot" in f.text)
        shown = _chat(kb_replica, tmp_path, "/memory")
        assert f"fact {car.id} (vehicle): my car is a Peugeot 206" in shown and "/forget ID" in shown
        after = _chat(kb_replica, tmp_path, f"/forget {car.id}", "/memory")
        assert "forgotten" in after
        assert [f.text for f in client.memory().facts] == ["I live in Yazd"]
        assert re.search(r"fact \w+ \(\w+\): I live in Yazd", after) and "Peugeot" not in after
