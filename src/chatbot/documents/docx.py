"""Read a Word file (DOCX) into a Document, with python-docx.

python-docx (MIT) opens the package and resolves each paragraph's style, its base styles
included; the body is walked here, in document order, as WordprocessingML: headings by their
style (Title, Heading 1..9, or an outline level), list items by numbering or a List style,
tables with their first row as header. docx2python and mammoth read the same text
(docs/measurements/office-html-extraction.md) but flatten the styles this reader needs.

Before anything is unpacked the file is checked: an OLE container (an encrypted Office file,
or a legacy .doc) is refused by its magic bytes, a zip whose parts would unpack past
`max_unpacked_bytes` (a zip bomb) by its directory, and tables nested past `max_nesting` by
a streaming pass over the body. Right-to-left paragraphs need nothing: Word stores text in
logical order, and it is read as stored.
"""

from __future__ import annotations

import re
import zipfile
from collections import Counter
from pathlib import Path
from typing import IO

import docx
from docx.document import Document as WordDocument
from docx.styles.style import BaseStyle
from lxml import etree

from chatbot.documents._sections import SectionBuilder, one_line
from chatbot.documents.model import Document, ListItem, Paragraph, ReadLimits, Table, Unreadable

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")
_MAX_RATIO = 200
"""A part that unpacks to more than this many times its packed size is taken for a zip bomb:
XML deflates about 10:1, and a bomb's parts run to thousands."""
_RATIO_FLOOR = 1024 * 1024
"""Parts that unpack to less than this are never judged by their ratio: a tiny part of spaces may well deflate 500:1."""
_MAX_PARTS = 10_000
_NESTING_FEED_BYTES = 8 * 1024
_LIST_STYLE = re.compile(r"list(?: bullet| number)?(?: \d)?")
"""Word's built-in list styles (List, List Bullet 2, List Number 3...); "List Paragraph" is only an indent."""


def _w(name: str) -> str:
    return f"{{{_W}}}{name}"


_T = _w("t")
_P = _w("p")
_TBL = _w("tbl")
_PPR = _w("pPr")
_PSTYLE = _w("pStyle")
_OUTLINE = _w("outlineLvl")
_NUM_ID = f"{_w('numPr')}/{_w('numId')}"
_VAL = _w("val")
_R = _w("r")
_BIDI = f"{_PPR}/{_w('bidi')}"
_RUN_LANG = f"{_w('rPr')}/{_w('lang')}"
_RUN_RTL = f"{_w('rPr')}/{_w('rtl')}"
_LANG_BIDI = _w("bidi")
_WRAPPERS = frozenset({_w("sdt"), _w("sdtContent"), _w("customXml"), _w("ins")})
_SPACES = frozenset({_w("tab"), _w("br"), _w("cr"), _w("ptab")})
_NO_BREAK_HYPHEN = _w("noBreakHyphen")
_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def read_docx(path: Path, limits: ReadLimits) -> Document:
    """Read a DOCX file, or raise Unreadable saying why it is not taken."""
    if path.stat().st_size > limits.max_bytes:
        raise Unreadable("too_large", f"file is over {limits.max_bytes} bytes")
    with path.open("rb") as raw:
        if raw.read(len(_OLE_MAGIC)) == _OLE_MAGIC:
            raise _ole_container(raw)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as error:
        raise Unreadable("corrupt", "not a zip package: a DOCX is one") from error
    with archive:
        _check_unpacked_size(archive, limits)
        _check_table_nesting(archive, limits)
    try:
        opened = docx.Document(str(path))
    except Exception as error:  # python-docx, zipfile and lxml each raise their own types on a broken package
        raise Unreadable("corrupt", f"not a readable Word package ({type(error).__name__})") from error
    return _BodyReader(opened, limits).read()


def _ole_container(raw: IO[bytes]) -> Unreadable:
    """Tell an encrypted Office file (its package sealed in an EncryptedPackage stream) from a legacy .doc."""
    raw.seek(0)
    tail = b""
    while chunk := raw.read(1024 * 1024):
        if _ENCRYPTED_STREAM in tail + chunk:
            return Unreadable("encrypted", "password-protected Office file")
        tail = chunk[-len(_ENCRYPTED_STREAM) :]
    return Unreadable("unsupported", "legacy Word (.doc) file: save it as .docx")


def _check_unpacked_size(archive: zipfile.ZipFile, limits: ReadLimits) -> None:
    """Refuse a zip bomb from its directory, before a byte is decompressed.

    zipfile stops each part at the size its directory entry declares, so the declared sizes
    bound what opening the package can cost.
    """
    parts = archive.infolist()
    if len(parts) > _MAX_PARTS:
        raise Unreadable("too_large", f"{len(parts)} parts in the package")
    total = sum(part.file_size for part in parts)
    if total > limits.max_unpacked_bytes:
        raise Unreadable("too_large", f"unpacks to {total} bytes, over {limits.max_unpacked_bytes}")
    for part in parts:
        if part.file_size > _RATIO_FLOOR and part.file_size > _MAX_RATIO * max(part.compress_size, 1):
            raise Unreadable(
                "too_large", f"a part unpacks {part.file_size // max(part.compress_size, 1)} times its size"
            )


def _check_table_nesting(archive: zipfile.ZipFile, limits: ReadLimits) -> None:
    """Stream the body once and refuse tables nested deeper than the limit, before building a tree."""
    try:
        body = archive.open("word/document.xml")
    except KeyError as error:
        raise Unreadable("corrupt", "no word/document.xml in the package") from error
    depth = 0
    # fed in small pieces so the events of one piece are seen before libxml2 goes deeper
    parser = etree.XMLPullParser(events=("start", "end"), tag=_w("tbl"), resolve_entities=False, no_network=True)
    try:
        with body:
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
    except etree.XMLSyntaxError as error:
        if "depth" in str(error).lower():
            raise Unreadable("too_complex", "elements nested over 256 deep") from error
        raise Unreadable("corrupt", "malformed document XML") from error
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise Unreadable("corrupt", f"damaged zip part ({type(error).__name__})") from error


class _BodyReader:
    """Walks one opened package's body in order and builds the Document."""

    def __init__(self, opened: WordDocument, limits: ReadLimits) -> None:
        self._opened = opened
        self._limits = limits
        self._sections = SectionBuilder(limits)
        self._styles: dict[str, BaseStyle] = {s.style_id: s for s in opened.styles if s.style_id}
        self._languages: Counter[str] = Counter()
        self._first_heading: str | None = None
        self._style_kinds: dict[str, tuple[int | None, bool]] = {}

    def read(self) -> Document:
        body = self._opened.element.body
        self._walk(body)
        title = (self._opened.core_properties.title or "").strip() or self._first_heading
        language = self._languages.most_common(1)[0][0] if self._languages else None
        return Document(title=title, language=language, sections=self._sections.finish())

    def _walk(self, container: etree._Element) -> None:
        for child in container:
            if child.tag == _P:
                self._paragraph(child)
            elif child.tag == _TBL:
                self._sections.add(_table(child))
            elif child.tag in _WRAPPERS:
                self._walk(child)  # content controls and tracked insertions wrap ordinary body content

    def _paragraph(self, p: etree._Element) -> None:
        text = one_line(_paragraph_text(p))
        if not text:
            return
        self._note_language(p)
        level, listed = self._kind(p)
        if level is not None:
            if self._first_heading is None and level == 1:
                self._first_heading = text
            self._sections.heading(level, text)
        elif listed:
            self._sections.add(ListItem(text))
        else:
            self._sections.add(Paragraph(text))

    def _kind(self, p: etree._Element) -> tuple[int | None, bool]:
        """Return a paragraph's heading level (None: not a heading) and whether it is a list item.

        Its own properties (an outline level, a numbering reference) come first; then its
        style's, read once per style.
        """
        properties = p.find(_PPR)
        style_id = ""
        level: int | None = None
        listed: bool | None = None
        if properties is not None:
            outline = properties.find(_OUTLINE)
            if outline is not None:
                level = _outline_level(outline)
            listed = _numbering(properties)
            style = properties.find(_PSTYLE)
            style_id = style.get(_VAL, "") if style is not None else ""
        if style_id not in self._style_kinds:
            self._style_kinds[style_id] = self._style_kind(style_id)
        style_level, style_listed = self._style_kinds[style_id]
        return (level if level is not None else style_level), (style_listed if listed is None else listed)

    def _style_kind(self, style_id: str) -> tuple[int | None, bool]:
        level: int | None = None
        listed: bool | None = None
        for style in self._style_chain(style_id):
            name = (style.name or "").strip().lower()
            properties = style.element.find(_PPR)
            if level is None:
                if name == "title":
                    level = 1
                elif name.startswith("heading ") and name[8:].isdigit() and 1 <= int(name[8:]) <= 9:
                    level = int(name[8:])
                elif properties is not None and (outline := properties.find(_OUTLINE)) is not None:
                    level = _outline_level(outline)
            if listed is None:
                listed = True if _LIST_STYLE.fullmatch(name) else _numbering(properties)
        return level, bool(listed)

    def _style_chain(self, style_id: str) -> list[BaseStyle]:
        """Return a style and the styles it is based on, nearest first."""
        chain: list[BaseStyle] = []
        style = self._styles.get(style_id)
        while style is not None and style not in chain and len(chain) < 16:
            chain.append(style)
            based_on = style.element.find(_w("basedOn"))
            style = self._styles.get(based_on.get(_VAL, "")) if based_on is not None else None
        return chain

    def _note_language(self, p: etree._Element) -> None:
        """Count the characters of each run under the language its run properties declare.

        A right-to-left run (`w:rtl`) is in the language of `w:lang/@w:bidi`, any other in
        `@w:val`. The template's document defaults are not counted: every Word file
        declares them, whatever it is written in.
        """
        right_to_left_paragraph = p.find(_BIDI) is not None
        for run in p.iter(_R):
            declared = run.find(_RUN_LANG)
            if declared is None:
                continue
            rtl = right_to_left_paragraph or run.find(_RUN_RTL) is not None
            tag = declared.get(_LANG_BIDI if rtl else _VAL) or declared.get(_VAL)
            if tag:
                chars = sum(len(t.text or "") for t in run.iter(_T))
                self._languages[tag.split("-")[0].lower()] += chars


def _outline_level(element: etree._Element) -> int | None:
    value = element.get(_w("val"), "")
    # outline level 9 is Word's "body text"; 0..8 are heading levels 1..9
    return int(value) + 1 if value.isdigit() and int(value) < 9 else None


def _numbering(properties: etree._Element | None) -> bool | None:
    """Return whether paragraph properties number the paragraph (numbering 0 takes it out of a list), or None."""
    if properties is None:
        return None
    number = properties.find(_NUM_ID)
    return None if number is None else number.get(_VAL, "0") != "0"


def _paragraph_text(p: etree._Element) -> str:
    """Return a paragraph's text in stored (logical) order: runs, hyperlinks, fields, insertions.

    Deleted text (`w:delText`) is not `w:t`, so it is never read; of a drawing stored twice
    (`mc:AlternateContent`), only the first choice is, so a text box is not read twice.
    """
    pieces: list[str] = []
    _gather(p, pieces)
    return "".join(pieces)


def _gather(element: etree._Element, pieces: list[str]) -> None:
    for child in element:
        tag = child.tag
        if tag == _T:
            pieces.append(child.text or "")
        elif tag in _SPACES:
            pieces.append(" ")
        elif tag == _NO_BREAK_HYPHEN:
            pieces.append("-")
        elif tag != _FALLBACK:
            _gather(child, pieces)


def _cell_text(cell: etree._Element) -> str:
    """Return a cell's paragraphs, and the rows of any table nested in it, as one line."""
    parts = []
    for child in cell:
        if child.tag == _w("p"):
            parts.append(_paragraph_text(child))
        elif child.tag == _w("tbl"):
            nested = _table(child)
            parts.append(" ".join(" ".join(row) for row in (nested.header, *nested.rows)))
        elif child.tag == _w("sdt"):
            content = child.find(_w("sdtContent"))
            parts.append(_cell_text(content if content is not None else child))
    return one_line(" ".join(parts))


def _table(tbl: etree._Element) -> Table:
    """Read a table, first row as header; a merged cell's text stands in every column and row it covers."""
    grid: list[tuple[str, ...]] = []
    above: dict[int, str] = {}
    for tr in tbl.findall(_w("tr")):
        row: list[str] = []
        for tc in tr.findall(_w("tc")):
            properties = tc.find(_w("tcPr"))
            span_node = properties.find(_w("gridSpan")) if properties is not None else None
            span_value = span_node.get(_w("val"), "1") if span_node is not None else "1"
            span = min(int(span_value), 64) if span_value.isdigit() else 1
            merge = properties.find(_w("vMerge")) if properties is not None else None
            column = len(row)
            if merge is not None and merge.get(_w("val"), "continue") == "continue":
                text = above.get(column, "")
            else:
                text = _cell_text(tc)
            for offset in range(max(span, 1)):
                above[column + offset] = text
                row.append(text)
        if any(row):
            grid.append(tuple(row))
    if not grid:
        return Table((), ())
    return Table(grid[0], tuple(grid[1:]))
