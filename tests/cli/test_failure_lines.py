"""Every `chatbot` command ends a failure with one line on standard error and a non-zero exit.

The commands run as a user runs them (a process of `python -m chatbot.cli`), so what is
checked is what a terminal shows: one sentence naming the cause and the fix, no traceback,
no warning noise. `--debug` shows the traceback instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.app import free_port
from tests.fixtures.postgres import TEST_SECRET

KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CHATBOT_MODEL", "CHATBOT_DATABASE_URL", "XDG_RUNTIME_DIR")


def chatbot(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
    return subprocess.run(
        [sys.executable, "-m", "chatbot.cli", *args],
        env={**base, "CHATBOT_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The failure's one line; fails on a zero exit, a traceback, a box or a second line."""
    shown = result.stdout + result.stderr
    assert result.returncode != 0, shown
    assert "Traceback" not in shown and "╭" not in shown and "Warning" not in shown, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    return lines[0]


def unreachable_postgres() -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/chatbot?connect_timeout=5"


def test_check_model_says_per_entry_which_key_is_missing(tmp_path: Path) -> None:
    result = chatbot("check-model", tmp_path=tmp_path, CHATBOT_MODEL="openai:gpt-4o-mini,anthropic:claude-haiku-4-5")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
    # One line per entry, as docs/operations.md lists them.
    assert result.stdout.splitlines() == [
        "answer[0] openai:gpt-4o-mini: no API key: export OPENAI_API_KEY, or use CHATBOT_MODEL=offline.",
        "answer[1] anthropic:claude-haiku-4-5: no API key: export ANTHROPIC_API_KEY, or use CHATBOT_MODEL=offline.",
    ]


def test_check_model_names_an_unknown_provider(tmp_path: Path) -> None:
    result = chatbot("check-model", tmp_path=tmp_path, CHATBOT_MODEL="foo:bar")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "answer[0] foo:bar: unknown provider 'foo': use openai, anthropic or ollama (as provider:model), or offline."
    ]


def test_eval_with_an_unknown_provider_or_no_key(tmp_path: Path) -> None:
    dataset = Path(__file__).resolve().parents[2] / "knowledge" / "demo" / "eval.jsonl"
    common = ("--tenant", "acme", "--out", str(tmp_path / "out"), "--dataset", str(dataset))
    line = one_line(chatbot("eval", "--model", "foo:bar", *common, tmp_path=tmp_path))
    assert "unknown provider 'foo'" in line and "offline" in line
    line = one_line(chatbot("eval", "--model", "openai:gpt-4o-mini", *common, tmp_path=tmp_path))
    assert line == "openai:gpt-4o-mini: no API key: export OPENAI_API_KEY, or use CHATBOT_MODEL=offline."
    line = one_line(
        chatbot("eval", "--model", "offline", *common[:4], "--from-feedback", "--since", "last week", tmp_path=tmp_path)
    )
    assert line.startswith("--since:") and "YYYY-MM-DD" in line


def test_eval_refuses_a_tenant_without_a_knowledge_base(tmp_path: Path, migrated_database_url: str) -> None:
    dataset = Path(__file__).resolve().parents[2] / "knowledge" / "demo" / "eval.jsonl"
    result = chatbot(
        "eval",
        "--model",
        "offline",
        "--tenant",
        "acmee",
        "--out",
        str(tmp_path / "out"),
        "--dataset",
        str(dataset),
        tmp_path=tmp_path,
        CHATBOT_DATABASE_URL=migrated_database_url,
    )
    assert one_line(result) == (
        "tenant acmee has no knowledge base: check --tenant, or load one with chatbot ingest --tenant acmee PATH."
    )
    assert not (tmp_path / "out").exists()


NO_OPENAI_KEY = "openai:gpt-4o-mini: no API key: export OPENAI_API_KEY, or use CHATBOT_MODEL=offline."


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("openai:gpt-4o-mini", NO_OPENAI_KEY),
        (
            "foo:bar",
            "foo:bar: unknown provider 'foo': use openai, anthropic or ollama (as provider:model), or offline.",
        ),
    ],
    ids=["missing key", "unknown provider"],
)
def test_serve_with_a_model_it_cannot_load(tmp_path: Path, migrated_database_url: str, model: str, said: str) -> None:
    result = chatbot(
        "serve",
        "--port",
        str(free_port()),
        tmp_path=tmp_path,
        CHATBOT_ENVIRONMENT="dev",
        CHATBOT_MODEL=model,
        CHATBOT_DATABASE_URL=migrated_database_url,
    )
    assert one_line(result) == said


def test_dev_with_a_model_missing_its_key_ends_on_it_and_stops_its_postgres(tmp_path: Path) -> None:
    result = chatbot("dev", "--port", str(free_port()), tmp_path=tmp_path, CHATBOT_MODEL="openai:gpt-4o-mini")
    shown = result.stdout + result.stderr
    # dev logs what it started before the model is built (JSON records); the failure is its last sentence.
    assert result.returncode != 0 and "Traceback" not in shown and "Warning" not in shown, shown
    assert [line for line in result.stderr.splitlines() if not line.startswith("{")][-1] == NO_OPENAI_KEY, shown
    assert not (tmp_path / "data" / "pg" / "postmaster.pid").exists()


def test_chat_with_no_service_listening(tmp_path: Path) -> None:
    port = free_port()
    result = chatbot(
        "chat",
        "--url",
        f"http://127.0.0.1:{port}",
        "--tenant",
        "acme",
        "--user",
        "u1",
        "--plain",
        tmp_path=tmp_path,
        CHATBOT_SERVICE_SECRET=TEST_SECRET,
    )
    line = one_line(result)
    assert line.startswith(f"cannot reach the service at http://127.0.0.1:{port} (ConnectError)")
    assert "make dev" in line and "--url" in line


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["retention", "--older-than", "30", "--dry-run"],
        ["erase-user", "--tenant", "acme", "--user", "u1"],
        ["replay", "t1", "00000000-0000-4000-8000-000000000000", "--tenant", "acme"],
        ["ingest", "--tenant", "acme", "."],
        ["feedback", "export", "--since", "2026-01-01", "--without-user-key"],
        ["usage", "--since", "2026-01-01"],
        ["eval", "--model", "offline", "--tenant", "acme", "--out", "out", "--from-feedback", "--since", "2026-01-01"],
    ],
    ids=lambda args: "-".join(args[:2]),
)
def test_every_database_command_says_postgres_is_unreachable(tmp_path: Path, args: list[str]) -> None:
    line = one_line(chatbot(*args, tmp_path=tmp_path, CHATBOT_DATABASE_URL=unreachable_postgres()))
    assert line.startswith("cannot reach Postgres (OperationalError): start it, or check CHATBOT_DATABASE_URL"), line


def test_debug_shows_the_traceback_instead(tmp_path: Path) -> None:
    result = chatbot("--debug", "migrate", tmp_path=tmp_path, CHATBOT_DATABASE_URL=unreachable_postgres())
    assert result.returncode != 0 and "Traceback" in result.stderr and "OperationalError" in result.stderr


def test_bad_dates(tmp_path: Path) -> None:
    line = one_line(chatbot("feedback", "export", "--since", "yesterday", "--without-user-key", tmp_path=tmp_path))
    assert line.startswith("--since:") and "YYYY-MM-DD" in line
    line = one_line(chatbot("usage", "--since", "yesterday", tmp_path=tmp_path))
    assert "--since" in line and "YYYY-MM-DD" in line


def test_replay_of_an_unknown_run(tmp_path: Path, migrated_database_url: str) -> None:
    result = chatbot(
        "replay",
        "t1",
        "00000000-0000-4000-8000-000000000000",
        "--tenant",
        "acme",
        tmp_path=tmp_path,
        CHATBOT_DATABASE_URL=migrated_database_url,
    )
    assert "check the three ids" in one_line(result)


def test_erase_user_says_when_nothing_matched(tmp_path: Path, migrated_database_url: str) -> None:
    result = chatbot(
        "erase-user",
        "--tenant",
        "acmee",
        "--user",
        "nobody",
        tmp_path=tmp_path,
        CHATBOT_DATABASE_URL=migrated_database_url,
    )
    # Nothing left to erase is what an erasure wants (exit 0), but it is said.
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "threads_deleted=0 memory_items_deleted=0 feedback_deleted=0"
    assert result.stderr.strip() == (
        "nothing matched: tenant acmee holds no threads, memory or feedback of user nobody "
        "(already erased, or check --tenant and --user)."
    )


def test_serve_with_unsafe_settings(tmp_path: Path) -> None:
    line = one_line(chatbot("serve", "--port", str(free_port()), tmp_path=tmp_path, CHATBOT_ENVIRONMENT="production"))
    assert line.startswith("configuration error:")


def test_no_runtime_dir_warning_when_the_embedded_postgres_starts(tmp_path: Path) -> None:
    result = chatbot("migrate", tmp_path=tmp_path)
    try:
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("migrated:")
        assert "Warning" not in result.stderr, result.stderr
    finally:
        assert not (tmp_path / "data" / "pg" / "postmaster.pid").exists()  # stopped at exit


def test_usage_errors_are_one_line_too(tmp_path: Path) -> None:
    result = chatbot("token", "--tenant", "acme.eu", "--user", "u1", tmp_path=tmp_path)
    assert result.returncode == 2
    assert one_line(result).startswith("Invalid value for '--tenant': 'acme.eu' is not a tenant or user id")
    # (run as `python -m chatbot.cli`, which is the command path these name)
    unknown = one_line(chatbot("migratee", tmp_path=tmp_path))
    assert unknown.startswith("No such command 'migratee'. Did you mean 'migrate'?: see `")
    assert unknown.endswith(" --help`.")
    missing = one_line(chatbot("token", tmp_path=tmp_path))
    assert missing.startswith("Missing option '--tenant': see `") and missing.endswith(" token --help`.")
