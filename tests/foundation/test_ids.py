"""Ids are types of their own: mypy refuses one id where another is due (chatbot/ids.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

SRC = Path(__file__).resolve().parents[2] / "src"

CALLS = """
from chatbot.caller import CallerContext
from chatbot.ids import RunId, TenantId, ThreadId, UserId


def cancel(thread_id: ThreadId, run_id: RunId) -> None: ...


tenant, user = TenantId("acme"), UserId("u-1")
thread, run = ThreadId("t-1"), RunId("0f8e2a4c-0000-4000-8000-000000000000")
{calls}
"""


def _mypy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: str) -> tuple[str, int]:
    """Type-check `calls` (after the ids above) with this tree's `chatbot` on the path."""
    monkeypatch.setenv("MYPYPATH", str(SRC))
    module = tmp_path / "calls.py"
    module.write_text(CALLS.format(calls=calls))
    args = ["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), str(module)]
    stdout, _, status = api.run(args)
    return stdout, status


def test_ids_in_their_places_type_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stdout, status = _mypy(tmp_path, monkeypatch, "CallerContext(tenant, user)\ncancel(thread, run)")
    assert status == 0, stdout


def test_swapped_ids_are_a_type_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stdout, status = _mypy(
        tmp_path, monkeypatch, "CallerContext(user, tenant)\ncancel(run, thread)\ncancel('t-1', run)"
    )
    assert status == 1
    assert 'Argument 1 to "CallerContext" has incompatible type "UserId"; expected "TenantId"' in stdout
    assert 'Argument 2 to "CallerContext" has incompatible type "TenantId"; expected "UserId"' in stdout
    assert 'Argument 1 to "cancel" has incompatible type "RunId"; expected "ThreadId"' in stdout
    assert 'Argument 1 to "cancel" has incompatible type "str"; expected "ThreadId"' in stdout
