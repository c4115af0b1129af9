"""A file is recognised by what it holds: its name is a hint at most."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from chatbot.documents.model import ReadLimits, Unreadable
from chatbot.documents.reader import DocumentReader
from chatbot.documents.sniff import sniff

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 32
OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504


def _zip(path: Path, *parts: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for part in parts:
            archive.writestr(part, "<x/>")
    return path


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_pdf_is_a_pdf_whatever_its_name(tmp_path: Path) -> None:
    assert sniff(_write(tmp_path / "policy.txt", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj")) == "pdf"
    assert sniff(_write(tmp_path / "no-suffix", b"%PDF-1.4\n")) == "pdf"


def test_a_docx_is_a_zip_holding_word_document_xml(tmp_path: Path) -> None:
    assert sniff(_zip(tmp_path / "procedure.bin", "[Content_Types].xml", "word/document.xml")) == "docx"


@pytest.mark.parametrize(
    ("name", "data", "reason", "says"),
    [
        ("photo.pdf", PNG, "unsupported", "PNG image"),
        ("scan.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF", "unsupported", "JPEG image"),
        ("old.doc", OLE, "unsupported", "legacy Office binary"),
        ("locked.docx", OLE + "EncryptedPackage".encode("utf-16-le"), "encrypted", "password-protected"),
        ("broken.pdf", b"this is not a PDF at all", "corrupt", "named .pdf"),
        ("broken.docx", b"plain words", "corrupt", "named .docx"),
        ("latin1.txt", "caf\u00e9 au lait".encode("latin-1"), "unsupported", "not UTF-8"),
        ("nul.txt", b"text\x00with a NUL", "unsupported", "binary"),
        ("eval.jsonl", b'{"question": "x"}\n', "unsupported", "data or code"),
    ],
    ids=[
        "png-named-pdf",
        "jpeg",
        "doc",
        "encrypted-docx",
        "text-named-pdf",
        "text-named-docx",
        "latin1",
        "nul",
        "jsonl",
    ],
)
def test_what_is_not_taken_says_why(tmp_path: Path, name: str, data: bytes, reason: str, says: str) -> None:
    with DocumentReader() as reader, pytest.raises(Unreadable) as caught:
        reader.recognise(_write(tmp_path / name, data))
    assert (caught.value.reason, says in caught.value.detail) == (reason, True), caught.value


@pytest.mark.parametrize(
    ("parts", "says"),
    [
        (("[Content_Types].xml", "xl/workbook.xml", "xl/worksheets/sheet1.xml"), "spreadsheet"),
        (("[Content_Types].xml", "ppt/presentation.xml"), "presentation"),
        (("notes.txt",), "zip archive"),
    ],
    ids=["xlsx", "pptx", "zip"],
)
def test_other_zips_are_unsupported(tmp_path: Path, parts: tuple[str, ...], says: str) -> None:
    with pytest.raises(Unreadable) as caught:
        sniff(_zip(tmp_path / "book.docx.zip", *parts))
    assert caught.value.reason == "unsupported" and says in caught.value.detail


def test_a_truncated_zip_is_corrupt(tmp_path: Path) -> None:
    whole = _zip(tmp_path / "whole.docx", "word/document.xml").read_bytes()
    with pytest.raises(Unreadable) as caught:
        sniff(_write(tmp_path / "cut.docx", whole[: len(whole) // 2]))
    assert caught.value.reason == "corrupt"


def test_html_by_content_or_name_markdown_by_name_text_otherwise(tmp_path: Path) -> None:
    assert sniff(_write(tmp_path / "faq.txt", b"\xef\xbb\xbf  <!DOCTYPE html><html lang='fa'>")) == "html"
    assert sniff(_write(tmp_path / "page", b"<!-- saved --><html><body>x</body></html>")) == "html"
    # An HTML page in a legacy charset is still HTML: its reader decodes it.
    assert sniff(_write(tmp_path / "legacy.htm", "<p>\u0633\u0644\u0627\u0645</p>".encode("cp1256"))) == "html"
    assert sniff(_write(tmp_path / "notes.md", "# بیمه\n\nمتن".encode())) == "markdown"
    assert sniff(_write(tmp_path / "notes.markdown", b"# Title")) == "markdown"
    assert sniff(_write(tmp_path / "notes.txt", b"Plain words.")) == "text"
    assert sniff(_write(tmp_path / "README", b"Plain words.")) == "text"


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = _write(tmp_path / "big.pdf", b"%PDF-1.7\n" + b"0" * 4096)
    with DocumentReader(ReadLimits(max_bytes=1024)) as reader, pytest.raises(Unreadable) as caught:
        reader.recognise(big)
    assert caught.value.reason == "too_large" and "limit" in caught.value.detail


def test_text_is_fingerprinted_as_ingest_always_did(tmp_path: Path) -> None:
    # The fingerprint of text is the sha256 of its decoded text (BOM dropped, newlines as \n),
    # so files ingested before keep counting as unchanged.
    path = _write(tmp_path / "doc.md", b"\xef\xbb\xbf# T\r\n\r\nBody.\r\n")
    with DocumentReader() as reader:
        found = reader.recognise(path)
    assert found.text == "# T\n\nBody.\n" and found.markdown
    assert found.fingerprint == hashlib.sha256(b"# T\n\nBody.\n").hexdigest()
