"""Recognise a file by what it holds (its first bytes, a zip's part names), its suffix only as a hint.

A PDF is a PDF whatever its name, a PNG named `.pdf` is an image, and a zip is a DOCX only
when it holds `word/document.xml` (an XLSX is a zip too). Text is what is left: it must be
UTF-8 (checked when it is read) and carry no NUL byte; `.md`/`.markdown` is Markdown, and a
name that says data or code (`.json`, `.csv`, `.py`...) is not prose and is not taken.

The rules are this module's own rather than a library's: `filetype` (the small maintained
choice) tells binaries by their magic numbers but knows neither HTML nor text, and takes any
zip whose first entry is under `word/` for a DOCX; what is needed here is a few magic
numbers and a look at a zip's central directory, bounded so a hostile archive costs nothing.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Literal

from chatbot.documents.model import Unreadable

Kind = Literal["pdf", "docx", "html", "markdown", "text"]
"""What a file is read as: PDF, DOCX and HTML by their readers, Markdown and text as they are."""

HEAD_BYTES = 8192
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
# A name promising one of these formats whose bytes are not it is a broken file, not text.
_CLAIMED = {".pdf": "PDF", ".docx": "DOCX"}
# Text that is data or code, not prose a customer would be answered from.
_NOT_PROSE = frozenset(
    {".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".xml", ".yaml", ".yml", ".toml", ".ini", ".py", ".js", ".sql"}
)
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
# Magic numbers of formats people keep beside documents, named in the skip line.
_BINARIES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"{\\rtf", "an RTF document (save it as DOCX)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"\x7fELF", "a program"),
)
_ZIP_PARTS = (
    ("word/document.xml", None),
    ("xl/workbook.xml", "a spreadsheet (XLSX)"),
    ("ppt/presentation.xml", "a presentation (PPTX)"),
    ("content.xml", "an OpenDocument file (save it as DOCX)"),
)
# A DOCX's central directory is a few kilobytes; past this the names are not looked at.
_MAX_DIRECTORY = 1024 * 1024
_MAX_EOCD_SEARCH = 65_536 + 22


def sniff(path: Path) -> Kind:
    """Return how `path` is read, or raise `Unreadable` (`unsupported`, `corrupt`, `encrypted`)."""
    suffix = path.suffix.lower()
    with path.open("rb") as file:
        head = file.read(HEAD_BYTES)
    if b"%PDF-" in head[:1024]:  # the header may follow up to 1 KB of junk (the PDF spec allows it)
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(path)
    if head.startswith(_OLE):
        if suffix in {".docx", ".xlsx", ".pptx"} or _ENCRYPTED_PACKAGE in _read_start(path, 1024 * 1024):
            raise Unreadable("encrypted", "a password-protected Office file")
        raise Unreadable("unsupported", "a legacy Office binary file (.doc, .xls): save it as DOCX")
    if head[8:12] == b"WEBP" and head.startswith(b"RIFF"):
        raise Unreadable("unsupported", "a WebP image")
    for magic, what in _BINARIES:
        if head.startswith(magic):
            raise Unreadable("unsupported", what)
    if suffix in _CLAIMED:
        raise Unreadable("corrupt", f"named {suffix} but not a {_CLAIMED[suffix]} file")
    if suffix in HTML_SUFFIXES or _looks_like_html(head):
        return "html"
    if b"\x00" in head or head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise Unreadable("unsupported", "a binary file (or text not in UTF-8)")
    if suffix in _NOT_PROSE:
        raise Unreadable("unsupported", f"{suffix} is data or code, not a document; name it .txt to take it as text")
    return "markdown" if suffix in MARKDOWN_SUFFIXES else "text"


def _looks_like_html(head: bytes) -> bool:
    """Tell whether the file starts as an HTML page does (any ASCII-compatible charset)."""
    start = head.removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return True
    return start.startswith((b"<!--", b"<?xml")) and b"<html" in start


def _read_start(path: Path, size: int) -> bytes:
    with path.open("rb") as file:
        return file.read(size)


def _zip_kind(path: Path) -> Kind:
    names = zip_part_names(path)
    for part, what in _ZIP_PARTS:
        if part in names:
            if what is None:
                return "docx"
            raise Unreadable("unsupported", what)
    if path.suffix.lower() == ".docx":
        raise Unreadable("corrupt", "named .docx but holds no word/document.xml")
    raise Unreadable("unsupported", "a zip archive")


def zip_part_names(path: Path) -> set[str]:
    """Return the part names a zip's central directory lists, reading at most about 1 MB of it.

    Read by hand, not with `zipfile`, whose directory of a hostile archive (millions of
    entries) would be built in full in this process; a broken directory is `corrupt`.
    """
    with path.open("rb") as file:
        size = file.seek(0, 2)
        tail_size = min(size, _MAX_EOCD_SEARCH)
        file.seek(size - tail_size)
        tail = file.read(tail_size)
        end = tail.rfind(b"PK\x05\x06")
        if end < 0 or end + 22 > len(tail):
            raise Unreadable("corrupt", "a zip file without its central directory")
        directory_size, directory_offset = struct.unpack_from("<II", tail, end + 12)
        if directory_offset >= size:
            raise Unreadable("corrupt", "a zip file whose central directory is out of bounds")
        file.seek(directory_offset)
        directory = file.read(min(directory_size, _MAX_DIRECTORY))
    names: set[str] = set()
    at = 0
    while at + 46 <= len(directory) and directory.startswith(b"PK\x01\x02", at):
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", directory, at + 28)
        names.add(directory[at + 46 : at + 46 + name_length].decode("utf-8", "replace"))
        at += 46 + name_length + extra_length + comment_length
    return names
