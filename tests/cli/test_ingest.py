"""`chatbot ingest` names every file it does not take, counts them, and says so in its exit status.

Run as an operator runs it (a `python -m chatbot.cli` process), so standard error, standard
output and the exit status are what a terminal or a script sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import psycopg

from tests.fixtures.retrieval_kb import write_docs

CONTENT = {"good.md": "# Good\n\nCovered.", "notes/plain.txt": "Plain words about cover."}


def _ingest(*args: str, cwd: Path, database_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHATBOT_")}
    return subprocess.run(
        [sys.executable, "-m", "chatbot.cli", "ingest", "--tenant", "acme", *args],
        env={**base, "CHATBOT_DATABASE_URL": database_url, "CHATBOT_DATA_DIR": str(cwd / "data"), **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _unreadable_files(root: Path) -> dict[str, str]:
    """Write files ingest cannot take; return each one's name and the words its line gives."""
    (root / "photo.pdf").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    (root / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504)
    with zipfile.ZipFile(root / "book.xlsx", "w") as book:
        book.writestr("xl/workbook.xml", "<workbook/>")
    (root / "latin1.txt").write_bytes("caf\u00e9".encode("latin-1"))
    (root / "broken.pdf").write_bytes(b"an error page saved as a PDF")
    (root / "huge.pdf").write_bytes(b"%PDF-1.7\n" + b"0" * 8192)
    return {
        "book.xlsx": "unsupported type",
        "broken.pdf": "corrupt",
        "huge.pdf": "too large",
        "latin1.txt": "unsupported type",
        "old.doc": "unsupported type",
        "photo.pdf": "unsupported type",
    }


def _stored(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "select document_id from kb_documents where tenant_id = 'acme' and removed_at is null order by 1"
        ).fetchall()
    return [row[0] for row in rows]


def test_each_skipped_file_is_one_line_on_stderr_and_the_exit_says_so(
    isolated_database_url: str, tmp_path: Path
) -> None:
    root = write_docs(tmp_path / "kb", CONTENT)
    expected = _unreadable_files(root)
    limit = {"CHATBOT_INGEST_MAX_BYTES": "4096"}
    result = _ingest("kb", cwd=tmp_path, database_url=isolated_database_url, **limit)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == len(expected), result.stderr
    for line, (name, words) in zip(lines, sorted(expected.items()), strict=True):
        assert line.startswith(f"skipped kb/{name}: {words} ("), line
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines() == [
        "added=2 updated=0 unchanged=0 removed=0 chunks_written=2 skipped=6",
    ]
    assert _stored(isolated_database_url) == ["good.md", "notes/plain.txt"]

    again = _ingest("--skip-unreadable", "kb", cwd=tmp_path, database_url=isolated_database_url, **limit)
    assert again.returncode == 0, again.stderr
    assert len(again.stderr.splitlines()) == len(expected)  # still named, one line each
    assert again.stdout.strip().endswith("unchanged=2 removed=0 chunks_written=0 skipped=6")


def test_a_clean_folder_exits_0_with_nothing_on_stderr(isolated_database_url: str, tmp_path: Path) -> None:
    write_docs(tmp_path / "kb", CONTENT)
    result = _ingest("kb", cwd=tmp_path, database_url=isolated_database_url)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.strip().endswith("skipped=0")
