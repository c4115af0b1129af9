"""The command line takes the token's tenant and user ids only: anything else exits 2 and does nothing.

`chatbot erase-user --user $'u1\\n'` used to exit 0 having erased nothing (no thread carries
that user), and `chatbot ingest --tenant $'x\\n'` stored chunks under a tenant no token can
name. One rule (chatbot/caller.py) now serves the API's token check and every `--tenant` and
`--user` option.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from chatbot.caller import is_caller_id
from chatbot.cli.main import app
from chatbot.retrieval.ingest import ingest_paths
from tests.fixtures.app import running_app
from tests.fixtures.tokens import auth

BAD_IDS = {
    "empty": "",
    "dotted": "u.1",
    "trailing newline": "u1\n",
    "leading space": " u1",
    "slash": "a/b",
    "129 characters": "u" * 129,
    "non-ASCII letter": "کاربر",
}


def _invoke(args: list[str], url: str = "postgresql://127.0.0.1:1/nowhere") -> tuple[int, str]:
    # The database URL points nowhere: a refused id must exit before any connection is tried.
    result = CliRunner().invoke(app, args, env={"CHATBOT_DATABASE_URL": url, "CHATBOT_SERVICE_SECRET": "x" * 40})
    # The error is drawn in a box on a terminal's width: read it as one line of words.
    return result.exit_code, " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())


@pytest.mark.parametrize("bad", list(BAD_IDS.values()), ids=list(BAD_IDS))
@pytest.mark.parametrize(
    "command",
    [
        ["erase-user", "--tenant", "acme", "--user", "{}"],
        ["erase-user", "--tenant", "{}", "--user", "u1"],
        ["ingest", "--tenant", "{}", "."],
        ["token", "--tenant", "{}", "--user", "u1"],
        ["token", "--tenant", "acme", "--user", "{}"],
        ["replay", "--tenant", "{}", "t1", "00000000-0000-0000-0000-000000000000"],
        ["chat", "--url", "http://127.0.0.1:1", "--tenant", "acme", "--user", "{}"],
    ],
    ids=["erase-user --user", "erase-user --tenant", "ingest", "token --tenant", "token --user", "replay", "chat"],
)
def test_a_bad_id_exits_2_with_the_rule(command: list[str], bad: str) -> None:
    code, output = _invoke([bad if arg == "{}" else arg for arg in command])
    assert code == 2, output
    assert "is not a tenant or user id" in output and "1 to 128 characters" in output


def test_the_rule_is_the_tokens(isolated_database_url: str) -> None:
    # Ids a token may carry pass the CLI; the ones above get 401 from the API too.
    assert all(is_caller_id(good) for good in ("acme", "u1", "tenant:eu-1", "a@b", "x" * 128))

    async def statuses() -> list[int]:
        async with running_app(isolated_database_url) as client:
            return [
                (await client.get("/v1/threads/t1/messages", headers=auth(tenant="acme", user=bad))).status_code
                for bad in BAD_IDS.values()
            ]

    assert set(asyncio.run(statuses())) == {401}


def test_erase_user_with_a_mistyped_user_erases_nothing_and_says_so(isolated_database_url: str) -> None:
    async def converse() -> None:
        async with running_app(isolated_database_url) as client:
            response = await client.post(
                "/v1/threads/t-ids/runs", headers=auth(user="u1"), json={"message": {"content": "hello"}}
            )
            assert response.status_code == 200

    asyncio.run(converse())
    code, output = _invoke(["erase-user", "--tenant", "acme", "--user", "u1\n"], isolated_database_url)
    assert code == 2, output
    with psycopg.connect(isolated_database_url) as conn:
        row = conn.execute("select count(*) from checkpoints where thread_id = 't-ids'").fetchone()
    assert row is not None and row[0] > 0  # nothing was erased, and the exit code says it failed


def test_ingest_under_a_tenant_no_token_can_name_stores_nothing(isolated_database_url: str, tmp_path: Path) -> None:
    (tmp_path / "doc.md").write_text("# Doc\n\nSome text about cover.\n", encoding="utf-8")
    code, output = _invoke(["ingest", "--tenant", "x\n", str(tmp_path)], isolated_database_url)
    assert code == 2, output
    with psycopg.connect(isolated_database_url) as conn:
        row = conn.execute("select count(*) from kb_chunks").fetchone()
    assert row == (0,)
    # The library entry point holds the same rule (bench, the dev command and tests call it).
    with pytest.raises(ValueError, match="tenant id"):
        asyncio.run(ingest_paths(None, "x\n", [tmp_path]))  # type: ignore[arg-type]
