"""`chatbot replay`: the run record, readable, from the command line."""

from __future__ import annotations

import os
import subprocess
import sys

from rich.console import Console

from chatbot.agent._prompts import system_prompt
from chatbot.cli.replay import record_sections, render
from chatbot.ids import TenantId, ThreadId
from chatbot.threads.record import read_run_record
from tests.fixtures.app import running_app, services_of
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.tokens import auth

QUESTION = "What does travel insurance cover for medical costs abroad?"


def replay(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHATBOT_DATABASE_URL": url, "CHATBOT_SERVICE_SECRET": TEST_SECRET}
    return subprocess.run(
        [sys.executable, "-m", "chatbot.cli", "replay", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_replay_prints_what_the_model_saw_and_said_as_plain_text_through_a_pipe(kb_database_url: str) -> None:
    async with running_app(kb_database_url) as client:
        end = (
            await client.post(
                "/v1/threads/replayed/runs",
                json={"message": {"content": QUESTION}},
                headers={"Accept": "application/json", **auth(locale="en-US")},
            )
        ).json()
        record = (await client.get(f"/v1/threads/replayed/runs/{end['run_id']}", headers=auth())).json()
    done = replay(kb_database_url, "--tenant", "acme", "replayed", end["run_id"], "--system-message")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "\x1b[" not in out  # no terminal styling through a pipe
    for heading in ("== Run ==", "== Window", "== Retrieved", "== Answer ==", "== System message as sent =="):
        assert heading in out
    assert QUESTION in out and end["message"]["content"] in out and end["citations"][0] in out
    assert system_prompt("en-US").splitlines()[0] in out  # the prompt's text, stored by its hash
    assert record["context"]["retrieved"][0]["text"].splitlines()[0] in out
    assert "context_tokens = " in out  # the settings that shaped the window


async def test_replay_refuses_another_tenants_run_and_unknown_runs(kb_database_url: str) -> None:
    async with running_app(kb_database_url) as client:
        end = (
            await client.post(
                "/v1/threads/replay-tenancy/runs",
                json={"message": {"content": QUESTION}},
                headers={"Accept": "application/json", **auth(locale="en-US")},
            )
        ).json()
    for tenant, run in (("other", end["run_id"]), ("acme", "not-a-uuid")):
        done = replay(kb_database_url, "--tenant", tenant, "replay-tenancy", run)
        assert done.returncode == 1 and "no run" in done.stderr and done.stdout == ""


async def test_replay_draws_panels_on_a_terminal(kb_database_url: str) -> None:
    async with running_app(kb_database_url) as client:
        end = (
            await client.post(
                "/v1/threads/replay-panels/runs",
                json={"message": {"content": QUESTION}},
                headers={"Accept": "application/json", **auth(locale="en-US")},
            )
        ).json()
        state = services_of(client)
        record = await read_run_record(
            state.pool, state.locks, ThreadId("replay-panels"), end["run_id"], TenantId("acme")
        )
    assert record is not None
    console = Console(force_terminal=True, record=True, width=100)
    render(record_sections(record), console)
    text = console.export_text()
    assert "╭─ Run" in text and "╭─ Answer" in text and end["message"]["content"].split()[0] in text
