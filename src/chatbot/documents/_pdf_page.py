"""One PDF page read through PDFium into lines and table grids, then released.

PDFium gives each character of the text layer with its ink box, font size and weight.
Characters are grouped into lines (PDFium's own line breaks, a jump in height, or a move
into another table cell); each line's ligatures are mended, its characters put in logical
order from their places (`_bidi.logical_order`, in the line's direction: its script's, or
its page's when it holds both), and it is repaired (`_persian.repair_line`). Ruled
rectangles that tile into rows and columns are a table's cells: the characters inside one
cell make that cell's text.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from chatbot.documents._bidi import logical_order
from chatbot.documents._persian import (
    Glyph,
    JoiningLetter,
    LetterForms,
    is_arabic_letter,
    is_rtl_text,
    joining_letters,
    letter_directions,
    mend_ligatures,
    repair_line,
)

BOLD_WEIGHT = 600
_EDGE = 3.0  # points: rectangles whose edges (stroke included) are this close share a row or a column


@dataclass(frozen=True, slots=True)
class Line:
    """One line of text on a page: its repaired text, box (top-down coordinates) and font."""

    text: str
    page: int
    left: float
    right: float
    top: float
    bottom: float
    size: float
    bold: bool
    rtl: bool


@dataclass(frozen=True, slots=True)
class Grid:
    """A ruled table on one page: its rows of cell texts, in reading order (right to left if Persian)."""

    page: int
    top: float
    bottom: float
    rows: tuple[tuple[str, ...], ...]


@dataclass(slots=True)
class PageText:
    """What one page holds, top to bottom: lines outside tables and the tables."""

    number: int
    width: float
    height: float
    items: list[Line | Grid] = field(default_factory=list)
    chars: int = 0


@dataclass(slots=True)
class _Cell:
    left: float
    right: float
    top: float
    bottom: float
    row: int
    column: int
    table: int


@dataclass(slots=True)
class _Run:
    """Characters gathered for one line, with the region (table cell or body) they are in."""

    region: int
    glyphs: list[Glyph] = field(default_factory=list)
    letters: list[JoiningLetter] = field(default_factory=list)
    top: float = 0.0
    bottom: float = 0.0
    size: float = 0.0
    rtl: bool = False
    inked: int = 0
    bold: int = 0
    """How many of its inked characters are bold: a line is bold when nearly all are."""


def read_page(document: pdfium.PdfDocument, index: int, forms: LetterForms) -> PageText:
    """Read page `index` (0-based) and close it before returning.

    `forms` gathers the letters' word-end shapes over the pages read so far (this one too):
    the ZWNJ a letter's form shows is found from them.
    """
    page = document[index]
    try:
        width, height = page.get_size()
        result = PageText(index + 1, width, height)
        cells = _cells(page, height)
        textpage = page.get_textpage()
        try:
            runs = _runs(textpage.raw, height, cells)
        finally:
            textpage.close()
    finally:
        page.close()
    result.chars = sum(len(r.glyphs) for r in runs)
    right, left = letter_directions("".join(g.char for run in runs for g in run.glyphs))
    page_rtl = right > left
    for run in runs:
        run.rtl = is_rtl_text("".join(g.char for g in run.glyphs), page_rtl)
        run.glyphs = logical_order(mend_ligatures(run.glyphs), run.rtl)
        run.letters = joining_letters(run.glyphs)
        forms.observe(run.letters)
    result.items = _items(runs, cells, result.number, forms)
    return result


def _cells(page: pdfium.PdfPage, height: float) -> list[_Cell]:
    """Find the ruled rectangles that tile into tables (two or more cells in a row, rows stacked)."""
    boxes: list[tuple[float, float, float, float]] = []
    left, bottom, right, top = (ctypes.c_float() for _ in range(4))
    for index in range(pdfium_c.FPDFPage_CountObjects(page.raw)):
        obj = pdfium_c.FPDFPage_GetObject(page.raw, index)
        if pdfium_c.FPDFPageObj_GetType(obj) != pdfium_c.FPDF_PAGEOBJ_PATH:
            continue
        if not pdfium_c.FPDFPageObj_GetBounds(obj, left, bottom, right, top):
            continue
        if right.value - left.value > 4 and top.value - bottom.value > 4:
            boxes.append((left.value, right.value, height - top.value, height - bottom.value))
    boxes.sort(key=lambda b: (round(b[2]), b[0]))
    cells: list[_Cell] = []
    table = -1
    row = -1
    previous_bottom = None
    previous_top = None
    for box_left, box_right, box_top, box_bottom in boxes:
        if previous_top is not None and abs(box_top - previous_top) <= _EDGE:
            column = cells[-1].column + 1
        else:
            if previous_bottom is None or abs(box_top - previous_bottom) > _EDGE:
                table += 1
                row = 0
            else:
                row += 1
            column = 0
            previous_top = box_top
        previous_bottom = box_bottom
        cells.append(_Cell(box_left, box_right, box_top, box_bottom, row, column, table))
    by_table: dict[int, list[_Cell]] = {}
    for cell in cells:
        by_table.setdefault(cell.table, []).append(cell)
    return [c for group in by_table.values() if max(c.column for c in group) >= 1 for c in group]


def _region(cells: list[_Cell], x: float, y: float) -> int:
    for index, cell in enumerate(cells):
        if cell.left <= x <= cell.right and cell.top <= y <= cell.bottom:
            return index
    return -1


def _runs(textpage: pdfium_c.FPDF_TEXTPAGE, height: float, cells: list[_Cell]) -> list[_Run]:
    """Group the page's characters into lines, each inside one region (a table cell or the body)."""
    count = pdfium_c.FPDFText_CountChars(textpage)
    if count <= 0:
        return []
    buffer = ctypes.create_string_buffer((count + 1) * 2)
    pdfium_c.FPDFText_GetText(textpage, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    text = buffer.raw[: count * 2].decode("utf-16-le", errors="replace")
    if len(text) != count:
        text = "".join(chr(pdfium_c.FPDFText_GetUnicode(textpage, i)) for i in range(count))
    left, right, bottom, top, origin_x, origin_y = (ctypes.c_double() for _ in range(6))
    # PDFium's calls bound once: a page has thousands of characters, each a few calls.
    char_box, font_size = pdfium_c.FPDFText_GetCharBox, pdfium_c.FPDFText_GetFontSize
    font_weight, char_origin = pdfium_c.FPDFText_GetFontWeight, pdfium_c.FPDFText_GetCharOrigin
    runs: list[_Run] = []
    current: _Run | None = None
    for index, char in enumerate(text):
        if char in "\r\n":
            current = None
            continue
        if char in "\x02\ufffe\xad":  # PDFium's mark for a hyphen at a line's end
            if current is not None:
                current.glyphs.append(Glyph("-", 0.0, 0.0, 0.0, True))
            continue
        char_box(textpage, index, left, right, bottom, top)
        size = font_size(textpage, index)
        if char == " ":
            if current is not None:
                current.glyphs.append(Glyph(" ", left.value, right.value, size, True))
            continue
        weight = font_weight(textpage, index)
        bold = weight >= BOLD_WEIGHT if weight > 0 else _bold_by_name(textpage, index)
        char_top, char_bottom = height - top.value, height - bottom.value
        middle = (char_top + char_bottom) / 2
        region = _region(cells, (left.value + right.value) / 2, middle) if cells else -1
        if (
            current is None
            or region != current.region
            or not (current.top - size * 0.3 <= middle <= current.bottom + size * 0.3)
        ):
            current = _Run(region, top=char_top, bottom=char_bottom, size=size)
            runs.append(current)
        if is_arabic_letter(char):  # only their shapes are compared (ZWNJ)
            char_origin(textpage, index, origin_x, origin_y)
            low, high = bottom.value - origin_y.value, top.value - origin_y.value
        else:
            low = high = 0.0
        current.glyphs.append(Glyph(char, left.value, right.value, size, False, low, high, bold))
        if not char.isspace():
            current.inked += 1
            current.bold += bold
            current.top = min(current.top, char_top)
            current.bottom = max(current.bottom, char_bottom)
            current.size = max(current.size, size)
    return runs


_BOLD_NAME = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)


def _bold_by_name(textpage: pdfium_c.FPDF_TEXTPAGE, index: int) -> bool:
    """Tell a bold font by its name, for fonts that declare no weight (the standard 14: Helvetica-Bold)."""
    flags = ctypes.c_int()
    length = pdfium_c.FPDFText_GetFontInfo(textpage, index, None, 0, flags)
    if length <= 0:
        return False
    name = ctypes.create_string_buffer(length)
    pdfium_c.FPDFText_GetFontInfo(textpage, index, name, length, flags)
    return bool(_BOLD_NAME.search(name.value.decode("latin-1")))


def _line(run: _Run, page: int, forms: LetterForms) -> Line | None:
    glyphs = run.glyphs
    while glyphs and glyphs[-1].char.isspace():
        glyphs = glyphs[:-1]
    raw = "".join(g.char for g in glyphs)
    if not raw.strip():
        return None
    rtl = run.rtl
    text = " ".join(repair_line(glyphs, rtl, forms, run.letters).split())
    inked = [g for g in glyphs if not g.char.isspace() and g.right > g.left] or glyphs
    return Line(
        text=text,
        page=page,
        left=min(g.left for g in inked),
        right=max(g.right for g in inked),
        top=run.top,
        bottom=run.bottom,
        size=round(run.size, 1),
        bold=run.bold >= 0.9 * run.inked,
        rtl=rtl,
    )


def _items(runs: list[_Run], cells: list[_Cell], page: int, forms: LetterForms) -> list[Line | Grid]:
    """Turn runs into body lines and table grids, sorted top to bottom."""
    items: list[Line | Grid] = []
    cell_lines: dict[int, list[Line]] = {}
    for run in runs:
        line = _line(run, page, forms)
        if line is None:
            continue
        if run.region < 0:
            items.append(line)
        else:
            cell_lines.setdefault(run.region, []).append(line)
    tables: dict[int, list[int]] = {}
    for index, cell in enumerate(cells):
        tables.setdefault(cell.table, []).append(index)
    for members in tables.values():
        rows: dict[int, list[tuple[float, str, bool]]] = {}
        rtl_votes = 0
        for index in members:
            lines = sorted(cell_lines.get(index, []), key=lambda ln: ln.top)
            text = " ".join(ln.text for ln in lines)
            rtl_votes += sum(1 if ln.rtl else -1 for ln in lines)
            rows.setdefault(cells[index].row, []).append((cells[index].left, text, any(ln.rtl for ln in lines)))
        ordered = tuple(
            tuple(text for _, text, _ in sorted(row, key=lambda c: c[0], reverse=rtl_votes > 0))
            for _, row in sorted(rows.items())
        )
        first, last = cells[members[0]], cells[members[-1]]
        items.append(Grid(page, first.top, last.bottom, ordered))
    items.sort(key=lambda item: item.top)
    return items
