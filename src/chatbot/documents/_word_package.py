"""The parts of a Word package the DOCX reader needs, found and checked before the body is read.

A DOCX is a zip of XML parts tied together by relationship files (Open Packaging
Conventions): `_rels/.rels` names the main document part and the core properties, and the
document's own relationships name its styles. Only those small parts are parsed whole here;
the body is streamed by the reader. Every check that can refuse a file runs first, on the
zip directory or in one streaming pass, before anything is built: a zip bomb (declared
sizes and ratios), an encrypted or legacy OLE file, tables nested too deep.
"""

from __future__ import annotations

import posixpath
import zipfile
from dataclasses import dataclass
from typing import IO

from lxml import etree

from chatbot.documents.model import ReadLimits, Unreadable

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_RELATIONSHIPS = "http://schemas.openxmlformats.org/package/2006/relationships"
_DUBLIN_CORE_TITLE = "{http://purl.org/dc/elements/1.1/}title"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")
_MAX_RATIO = 200
"""A part that unpacks to more than this many times its packed size is taken for a zip bomb:
XML deflates about 10:1, and a bomb's parts run to thousands."""
_RATIO_FLOOR = 1024 * 1024
"""Parts under this size are never judged by their ratio: a small part of spaces may deflate 500:1."""
_MAX_PARTS = 10_000
_NESTING_FEED_BYTES = 8 * 1024


def w(name: str) -> str:
    """Return the WordprocessingML tag or attribute `name` with its namespace."""
    return f"{{{W}}}{name}"


@dataclass(frozen=True, slots=True)
class Style:
    """What a paragraph style says about its paragraphs, before its base style is consulted."""

    name: str
    """Lower case: Word stores built-in names in English whatever the interface language."""
    based_on: str | None
    outline_level: str | None
    numbered: bool | None
    """Its numbering reference: True, False for numbering 0, None for none."""


@dataclass(frozen=True, slots=True)
class WordPackage:
    """The main document part's name, the paragraph styles by id, and the core properties' title."""

    document_part: str
    styles: dict[str, Style]
    title: str | None


def refuse_ole_container(raw: IO[bytes]) -> None:
    """Refuse an OLE file: an encrypted Office file (an EncryptedPackage stream inside) or a legacy .doc."""
    raw.seek(0)
    if raw.read(len(_OLE_MAGIC)) != _OLE_MAGIC:
        raw.seek(0)
        return
    tail = b""
    while chunk := raw.read(1024 * 1024):
        if _ENCRYPTED_STREAM in tail + chunk:
            raise Unreadable("encrypted", "password-protected Office file")
        tail = chunk[-len(_ENCRYPTED_STREAM) :]
    raise Unreadable("unsupported", "legacy Word (.doc) file: save it as .docx")


def open_package(archive: zipfile.ZipFile, limits: ReadLimits) -> WordPackage:
    """Check the package and read its small parts; raise Unreadable for a bomb, deep tables or a broken package."""
    check_unpacked_size(archive, limits)
    package_relations = _relations(archive, "_rels/.rels", base="")
    document_part = package_relations.get("officeDocument")
    if document_part is None or document_part not in archive.NameToInfo:
        raise Unreadable("corrupt", "no main document part in the package")
    check_table_nesting(archive, document_part, limits)
    folder, name = posixpath.split(document_part)
    document_relations = _relations(archive, posixpath.join(folder, "_rels", f"{name}.rels"), base=folder)
    styles_part = document_relations.get("styles")
    styles = _styles(_parse(archive, styles_part)) if styles_part in archive.NameToInfo else {}
    core_part = package_relations.get("core-properties")
    title = None
    if core_part in archive.NameToInfo:
        title = (_parse(archive, core_part).findtext(_DUBLIN_CORE_TITLE) or "").strip() or None
    return WordPackage(document_part, styles, title)


def check_unpacked_size(archive: zipfile.ZipFile, limits: ReadLimits) -> None:
    """Refuse a zip bomb from its directory, before a byte is decompressed.

    zipfile stops each part at the size its directory entry declares, so the declared sizes
    bound what reading the package can cost.
    """
    parts = archive.infolist()
    if len(parts) > _MAX_PARTS:
        raise Unreadable("too_large", f"{len(parts)} parts in the package")
    total = sum(part.file_size for part in parts)
    if total > limits.max_unpacked_bytes:
        raise Unreadable("too_large", f"unpacks to {total} bytes, over {limits.max_unpacked_bytes}")
    for part in parts:
        packed = max(part.compress_size, 1)
        if part.file_size > _RATIO_FLOOR and part.file_size > _MAX_RATIO * packed:
            raise Unreadable("too_large", f"a part unpacks {part.file_size // packed} times its size")


def check_table_nesting(archive: zipfile.ZipFile, part: str, limits: ReadLimits) -> None:
    """Stream the body once and refuse tables nested deeper than the limit, before building anything."""
    depth = 0
    # fed in small pieces so the events of one piece are seen before libxml2 goes deeper
    parser = etree.XMLPullParser(events=("start", "end"), tag=w("tbl"), resolve_entities=False, no_network=True)
    with archive.open(part) as body:
        while chunk := body.read(_NESTING_FEED_BYTES):
            parser.feed(chunk)
            for event, element in parser.read_events():
                if event == "start":
                    depth += 1
                    if depth > limits.max_nesting:
                        raise Unreadable("too_complex", f"tables nested over {limits.max_nesting} deep")
                else:
                    depth -= 1
                    element.clear(keep_tail=True)
        parser.close()


def safe_parser() -> etree.XMLParser:
    """Return an XML parser that expands no entity and fetches nothing."""
    return etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)


def _parse(archive: zipfile.ZipFile, part: str) -> etree._Element:
    return etree.fromstring(archive.read(part), safe_parser())


def _relations(archive: zipfile.ZipFile, part: str, base: str) -> dict[str, str]:
    """Return a relationship part as {type's last word: target part name}, internal targets only."""
    if part not in archive.NameToInfo:
        return {}
    found: dict[str, str] = {}
    for relation in _parse(archive, part).iter(f"{{{_RELATIONSHIPS}}}Relationship"):
        if relation.get("TargetMode") == "External":
            continue
        kind = relation.get("Type", "").rsplit("/", 1)[-1]
        target = relation.get("Target", "")
        name = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))
        found.setdefault(kind, name)
    return found


def _styles(root: etree._Element) -> dict[str, Style]:
    styles = {}
    for style in root.iter(w("style")):
        style_id = style.get(w("styleId"))
        if not style_id or style.get(w("type"), "paragraph") != "paragraph":
            continue
        name = style.find(w("name"))
        based_on = style.find(w("basedOn"))
        outline = style.find(f"{w('pPr')}/{w('outlineLvl')}")
        number = style.find(f"{w('pPr')}/{w('numPr')}/{w('numId')}")
        styles[style_id] = Style(
            name=(name.get(w("val"), "") if name is not None else "").strip().lower(),
            based_on=based_on.get(w("val")) if based_on is not None else None,
            outline_level=outline.get(w("val")) if outline is not None else None,
            numbered=None if number is None else number.get(w("val"), "0") != "0",
        )
    return styles
