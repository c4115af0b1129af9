"""The readers run in a worker process: a crash, a hang or a memory blow-up fails that file alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatbot.documents.model import Document, Paragraph, ReadLimits, Section, Unreadable
from chatbot.documents.reader import DocumentReader, read_document
from tests.fixtures.document_readers import ABORTS, ALLOCATES, DESCRIBED, HANGS, RAISES, write_described

PAGED = Document(
    "Policy wording",
    "en",
    (Section(("Policy wording", "Cover"), (Paragraph("Glass is covered.", (4,)),)),),
    paged=True,
)
# Small enough for a test, large enough for Python, the readers' imports and a real page.
MEMORY = 512 * 1024**2


def _reader(misbehaving: str, seconds: float = 60.0) -> DocumentReader:
    # PDF files go to the misbehaving reader, HTML files to one that reads what it is given.
    return DocumentReader(
        ReadLimits(seconds=seconds), memory_bytes=MEMORY, readers={"pdf": misbehaving, "html": DESCRIBED}
    )


def _good(tmp_path: Path) -> Path:
    return write_described(tmp_path / "good.html", PAGED, magic=b"<!DOCTYPE html>\n")


def _read(reader: DocumentReader, path: Path) -> Document:
    return reader.read(reader.recognise(path))


def _refusal(reader: DocumentReader, path: Path) -> Unreadable:
    with pytest.raises(Unreadable) as caught:
        _read(reader, path)
    return caught.value


@pytest.mark.parametrize(
    ("misbehaving", "reason", "says"),
    [
        (ABORTS, "crashed", "SIGABRT"),
        (ALLOCATES, "too_large", "memory"),
        (RAISES, "corrupt", "ValueError"),
    ],
    ids=["crash", "memory", "exception"],
)
def test_a_failing_reader_fails_its_file_alone(tmp_path: Path, misbehaving: str, reason: str, says: str) -> None:
    bad = write_described(tmp_path / "bad.pdf", PAGED)
    with _reader(misbehaving) as reader:
        assert _read(reader, _good(tmp_path)) == PAGED
        refusal = _refusal(reader, bad)
        assert (refusal.reason, says in refusal.detail) == (reason, True), refusal
        # No file content in the line: a library's message may quote the file.
        assert "secret" not in str(refusal)
        # The next file is read by a worker that works (the same one, or a fresh one).
        assert _read(reader, _good(tmp_path)) == PAGED


def test_a_hanging_reader_is_stopped_at_its_bound_and_the_next_file_is_read(tmp_path: Path) -> None:
    with _reader(HANGS, seconds=1.0) as reader:
        refusal = _refusal(reader, write_described(tmp_path / "stuck.pdf", PAGED))
        assert refusal.reason == "timeout" and "1 s" in refusal.detail
        assert _read(reader, _good(tmp_path)) == PAGED


def test_the_worker_is_reused_across_files(tmp_path: Path) -> None:
    with _reader(DESCRIBED) as reader:
        _read(reader, _good(tmp_path))
        worker = reader._worker
        assert worker is not None
        for _ in range(3):
            _read(reader, write_described(tmp_path / "again.pdf", PAGED))
        assert reader._worker is worker and worker.alive()
    assert not worker.alive()  # closing the reader stops it


def test_text_is_not_read_by_a_document_reader(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Notes\n", encoding="utf-8")
    with pytest.raises(Unreadable) as caught:
        read_document(tmp_path / "notes.md")
    assert caught.value.reason == "unsupported"


def test_read_document_refuses_what_is_not_a_document_before_starting_a_worker(tmp_path: Path) -> None:
    (tmp_path / "photo.pdf").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    with pytest.raises(Unreadable) as caught:
        read_document(tmp_path / "photo.pdf")
    assert caught.value.reason == "unsupported" and "PNG" in caught.value.detail
