"""Read a Word file (DOCX) into a Document, streaming its body with lxml.

The package's small parts (relationships, styles, core properties) are read by
`_word_package.py`, after the checks that refuse a file before anything is unpacked: an
OLE container (an encrypted Office file, or a legacy .doc) by its magic bytes, a zip bomb by
the zip directory, tables nested past `max_nesting` by a streaming pass. The body is then
streamed: each top-level paragraph or table is read when its end tag arrives and freed, so
a large file costs memory for its largest block, not for its whole tree.

Headings come from their style (Title, Heading 1..9, or an outline level, through the
`basedOn` chain), list items from a numbering reference or a List style, tables with their
first row as header. Right-to-left paragraphs need nothing: Word stores text in logical
order, and it is read as stored. python-docx, docx2python and mammoth were measured
(docs/measurements/office-html-extraction.md): python-docx reads the same structure but
builds the whole document tree first (about five times the XML's size in memory).
"""

from __future__ import annotations

import re
import zipfile
import zlib
from collections import Counter
from pathlib import Path

from lxml import etree

from chatbot.documents._sections import SectionBuilder, one_line
from chatbot.documents._word_package import WordPackage, open_package, refuse_ole_container, w
from chatbot.documents.model import Document, ListItem, Paragraph, ReadLimits, Table, Unreadable

_LIST_STYLE = re.compile(r"list(?: bullet| number)?(?: \d)?")
"""Word's built-in list styles (List, List Bullet 2, List Number 3...); "List Paragraph" is only an indent."""
_HEADING_STYLE = re.compile(r"heading ([1-9])")

_T = w("t")
_P = w("p")
_TBL = w("tbl")
_TR = w("tr")
_TC = w("tc")
_TC_PR = w("tcPr")
_BODY = w("body")
_PPR = w("pPr")
_PSTYLE = w("pStyle")
_OUTLINE = w("outlineLvl")
_NUM_ID = f"{w('numPr')}/{w('numId')}"
_VAL = w("val")
_R = w("r")
_BIDI = f"{_PPR}/{w('bidi')}"
_RUN_LANG = f"{w('rPr')}/{w('lang')}"
_RUN_RTL = f"{w('rPr')}/{w('rtl')}"
_LANG_BIDI = w("bidi")
_SDT = w("sdt")
_SDT_CONTENT = w("sdtContent")
_WRAPPERS = frozenset({_SDT, _SDT_CONTENT, w("customXml"), w("ins")})
_BODY_BLOCKS = (_P, _TBL, *_WRAPPERS)
_SPACES = frozenset({w("tab"), w("br"), w("cr"), w("ptab")})
_NO_BREAK_HYPHEN = w("noBreakHyphen")
_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_BROKEN_ZIP = (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError, RuntimeError, NotImplementedError)
"""What zipfile raises on a damaged part: bad CRC or data, truncation, an unsupported or encrypted entry."""


def read_docx(path: Path, limits: ReadLimits) -> Document:
    """Read a DOCX file, or raise Unreadable saying why it is not taken."""
    if path.stat().st_size > limits.max_bytes:
        raise Unreadable("too_large", f"file is over {limits.max_bytes} bytes")
    with path.open("rb") as raw:
        refuse_ole_container(raw)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as error:
        raise Unreadable("corrupt", "not a zip package: a DOCX is one") from error
    with archive:
        try:
            package = open_package(archive, limits)
            return _BodyReader(package, limits).read(archive)
        except etree.XMLSyntaxError as error:
            if "depth" in str(error).lower():
                raise Unreadable("too_complex", "elements nested over 256 deep") from error
            raise Unreadable("corrupt", "malformed XML in the package") from error
        except _BROKEN_ZIP as error:
            raise Unreadable("corrupt", f"damaged zip part ({type(error).__name__})") from error


class _BodyReader:
    """Streams one package's body in order and builds the Document."""

    def __init__(self, package: WordPackage, limits: ReadLimits) -> None:
        self._package = package
        self._limits = limits
        self._sections = SectionBuilder(limits)
        self._languages: Counter[str] = Counter()
        self._first_heading: str | None = None
        self._style_kinds: dict[str, tuple[int | None, bool]] = {}

    def read(self, archive: zipfile.ZipFile) -> Document:
        with archive.open(self._package.document_part) as stream:
            events = etree.iterparse(
                stream,
                events=("start", "end"),
                tag=(_BODY, *_BODY_BLOCKS),
                resolve_entities=False,
                no_network=True,
                huge_tree=False,
            )
            has_body = False
            for event, element in events:
                if event == "start":
                    has_body = has_body or element.tag == _BODY
                    continue
                parent = element.getparent()
                if parent is None or parent.tag != _BODY:
                    continue  # inside a body block: read with it when it ends
                self._block(element)
                element.clear()
                while element.getprevious() is not None:
                    del parent[0]  # the blocks read so far: freed, so memory holds one block at a time
        if not has_body:
            # another Office format, or Strict Open XML (its elements in another namespace): nothing here is read
            raise Unreadable("unsupported", "no Word body in the main part (another Office format, or Strict Open XML)")
        title = self._package.title or self._first_heading
        language = self._languages.most_common(1)[0][0] if self._languages else None
        return Document(title=title, language=language, sections=self._sections.finish())

    def _block(self, element: etree._Element) -> None:
        if element.tag == _P:
            self._paragraph(element)
        elif element.tag == _TBL:
            self._sections.add(_table(element))
        elif element.tag in _WRAPPERS:
            for child in element:
                self._block(child)  # content controls and tracked insertions wrap ordinary body content

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
                level = _outline_level(outline.get(_VAL, ""))
            number = properties.find(_NUM_ID)
            listed = None if number is None else number.get(_VAL, "0") != "0"
            style = properties.find(_PSTYLE)
            style_id = style.get(_VAL, "") if style is not None else ""
        if style_id not in self._style_kinds:
            self._style_kinds[style_id] = self._style_kind(style_id)
        style_level, style_listed = self._style_kinds[style_id]
        return (level if level is not None else style_level), (style_listed if listed is None else listed)

    def _style_kind(self, style_id: str) -> tuple[int | None, bool]:
        """Return what a style and those it is based on (nearest first) make of a paragraph."""
        level: int | None = None
        listed: bool | None = None
        seen: set[str] = set()
        style = self._package.styles.get(style_id)
        while style is not None and style_id not in seen and len(seen) < 16:
            seen.add(style_id)
            if level is None:
                heading = _HEADING_STYLE.fullmatch(style.name)
                if style.name == "title":
                    level = 1
                elif heading:
                    level = int(heading.group(1))
                elif style.outline_level is not None:
                    level = _outline_level(style.outline_level)
            if listed is None:
                listed = True if _LIST_STYLE.fullmatch(style.name) else style.numbered
            style_id = style.based_on or ""
            style = self._package.styles.get(style_id)
        return level, bool(listed)

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


def _outline_level(value: str) -> int | None:
    # outline level 9 is Word's "body text"; 0..8 are heading levels 1..9
    return int(value) + 1 if value.isdigit() and int(value) < 9 else None


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
        if child.tag == _P:
            parts.append(_paragraph_text(child))
        elif child.tag == _TBL:
            nested = _table(child)
            parts.append(" ".join(" ".join(row) for row in (nested.header, *nested.rows)))
        elif child.tag == _SDT:
            content = child.find(_SDT_CONTENT)
            parts.append(_cell_text(content if content is not None else child))
    return one_line(" ".join(parts))


def _table(tbl: etree._Element) -> Table:
    """Read a table, first row as header; a merged cell's text stands in every column and row it covers."""
    grid: list[tuple[str, ...]] = []
    above: dict[int, str] = {}
    for tr in tbl.findall(_TR):
        row: list[str] = []
        for tc in tr.findall(_TC):
            properties = tc.find(_TC_PR)
            span_node = properties.find(w("gridSpan")) if properties is not None else None
            span_value = span_node.get(w("val"), "1") if span_node is not None else "1"
            span = min(int(span_value), 64) if span_value.isdigit() else 1
            merge = properties.find(w("vMerge")) if properties is not None else None
            column = len(row)
            if merge is not None and merge.get(w("val"), "continue") == "continue":
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
