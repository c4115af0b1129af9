"""A PDF's pages of lines and tables made into a `Document`: headings, paragraphs, items, tables.

- Running headers, footers and page numbers: a line at the top or bottom of a page whose text,
  digits aside, comes back on at least half of the pages (two at least) is dropped and counted.
- Headings: lines set larger than the body text (the size most text has), larger first; a
  short bold line at body size is a heading below those.
- Paragraphs: lines of one size, close below each other, re-flowed into one text, a word
  hyphenated at a line's end joined again; a paragraph goes on over a page break when its
  last line runs to the column's end.
- List items start with a bullet or a number; tables come ruled (`_pdf_page.Grid`), and a table
  going on at the top of the next page (its header repeated or not) is one table.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from chatbot.documents._pdf_page import Grid, Line, PageText
from chatbot.documents.model import Block, Document, ListItem, Pages, Paragraph, Section, Table

_DIGITS = re.compile(r"[0-9\u0660-\u0669\u06f0-\u06f9]+")
_PAGE_NUMBER = re.compile(r"^(?:page|p\.|صفحه)?\s*#(?:\s*(?:of|/|از)\s*#)?$", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[•◦▪‣·●○■\-–*]|[0-9]+[.)]|[۰-۹]+[.)]|[٠-٩]+[.)])\s+")
_SENTENCE_END = (".", "!", "?", "؟", ":", "؛", ";")
_HEADING_RATIO = 1.12
_EDGE_LINES = 2


def build_document(pages: list[PageText]) -> Document:
    """Make the Document from every page's lines and tables, in reading order."""
    body = _body_size([item for page in pages for item in page.items if isinstance(item, Line)])
    kept, dropped = _drop_repeats(pages, body)
    lines = [item for item in kept if isinstance(item, Line)]
    levels = _heading_levels(lines, body)
    builder = _Builder(body, levels, _column(lines, body, levels))
    for item in kept:
        builder.add(item)
    return builder.finish(dropped)


def _signature(line: Line) -> str:
    return _DIGITS.sub("#", line.text).strip().casefold()


def _drop_repeats(pages: list[PageText], body: float) -> tuple[list[Line | Grid], int]:
    """Return the items left once running headers, footers and page numbers are dropped, and how many went.

    A one-page document has nothing to repeat: there, the first and last line are taken for a
    running header and footer when they are set smaller than the body text.
    """
    edges: list[set[int]] = []
    seen: Counter[str] = Counter()
    for page in pages:
        lines = [i for i, item in enumerate(page.items) if isinstance(item, Line)]
        edge = set(lines[:_EDGE_LINES] + lines[-_EDGE_LINES:])
        edges.append(edge)
        seen.update({_signature(page.items[i]) for i in edge})  # type: ignore[arg-type]
    needed = max(2, (len(pages) + 1) // 2)
    kept: list[Line | Grid] = []
    dropped = 0
    for page, edge in zip(pages, edges, strict=True):
        for index, item in enumerate(page.items):
            if index in edge and isinstance(item, Line):
                signature = _signature(item)
                alone = len(pages) == 1 and index in (0, len(page.items) - 1) and item.size < 0.85 * body
                if seen[signature] >= needed or _PAGE_NUMBER.match(signature) or alone:
                    dropped += 1
                    continue
            kept.append(item)
    return kept, dropped


def _body_size(lines: list[Line]) -> float:
    sizes: Counter[float] = Counter()
    for line in lines:
        sizes[line.size] += len(line.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _heading_levels(lines: list[Line], body: float) -> dict[float, int]:
    larger = sorted({ln.size for ln in lines if ln.size >= body * _HEADING_RATIO}, reverse=True)
    return {size: level for level, size in enumerate(larger, start=1)}


@dataclass(frozen=True, slots=True)
class _Column:
    left: float
    right: float

    def runs_to_end(self, line: Line) -> bool:
        """Tell whether a line fills the column, so its paragraph goes on after it.

        A wrapped line leaves at most a word's room; one that ends a sentence goes on only if
        it leaves next to none.
        """
        width = self.right - self.left
        empty = line.left - self.left if line.rtl else self.right - line.right
        return empty < (0.08 if line.text.endswith(_SENTENCE_END) else 0.25) * width

    def indented(self, line: Line) -> bool:
        """Tell whether a line starts in from the column's edge (a list item's next lines hang there)."""
        if line.rtl:
            return line.right < self.right - 0.5 * line.size
        return line.left > self.left + 0.5 * line.size


def _column(lines: list[Line], body: float, levels: dict[float, int]) -> _Column:
    text = [ln for ln in lines if ln.size not in levels] or lines
    if not text:
        return _Column(0.0, 0.0)
    return _Column(min(ln.left for ln in text), max(ln.right for ln in text))


@dataclass
class _Open:
    """The block being gathered: a paragraph or a list item, its lines so far."""

    kind: type[Paragraph] | type[ListItem]
    lines: list[Line]


@dataclass
class _Builder:
    body: float
    levels: dict[float, int]
    column: _Column
    sections: list[Section] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    open: _Open | None = None
    heading: list[Line] = field(default_factory=list)
    title: str | None = None
    last_table_page: int | None = None

    def add(self, item: Line | Grid) -> None:
        if isinstance(item, Grid):
            self._close_heading()
            self._close_block()
            self._add_table(item)
            return
        self.last_table_page = None
        level = self._heading_level(item)
        if level:
            self._close_block()
            if self.heading and (self.heading[-1].size != item.size or item.top - self.heading[-1].bottom > item.size):
                self._close_heading()
            self.heading.append(item)
            return
        self._close_heading()
        bullet = _BULLET.match(item.text)
        if bullet:
            self._close_block()
            self.open = _Open(ListItem, [replace(item, text=item.text[bullet.end() :])])
        elif self.open is not None and self._continues(self.open.lines[-1], item):
            self.open.lines.append(item)
        else:
            self._close_block()
            self.open = _Open(Paragraph, [item])

    def _heading_level(self, line: Line) -> int:
        if line.size in self.levels:
            return self.levels[line.size]
        short = (line.right - line.left) < 0.6 * (self.column.right - self.column.left)
        after_bold = self.open is not None and self.open.lines[-1].bold
        if line.bold and short and not after_bold and not _BULLET.match(line.text):
            return len(self.levels) + 1
        return 0

    def _continues(self, previous: Line, line: Line) -> bool:
        if abs(previous.size - line.size) > 0.5 or previous.bold != line.bold:
            return False
        if self.open is not None and self.open.kind is ListItem and not self.column.indented(line):
            return False
        if line.page != previous.page:
            return line.page == previous.page + 1 and self.column.runs_to_end(previous)
        # Ink boxes: a line without ascenders starts lower, one without descenders ends higher.
        return 0 <= min(line.top - previous.top, line.bottom - previous.bottom) <= 1.6 * line.size

    def _close_heading(self) -> None:
        if not self.heading:
            return
        text = reflow(ln.text for ln in self.heading)
        level = self.levels.get(self.heading[0].size, len(self.levels) + 1)
        self.heading = []
        self._close_section()
        del self.path[level - 1 :]
        self.path.append(text)
        if level == 1 and self.title is None:
            self.title = text

    def _close_block(self) -> None:
        if self.open is None:
            return
        lines = self.open.lines
        self.blocks.append(self.open.kind(reflow(ln.text for ln in lines), _pages(ln.page for ln in lines)))
        self.open = None

    def _close_section(self) -> None:
        self._close_block()
        if self.blocks:
            self.sections.append(Section(tuple(self.path), tuple(self.blocks)))
            self.blocks = []

    def _add_table(self, grid: Grid) -> None:
        rows = [r for r in grid.rows if any(c.strip() for c in r)]
        if not rows:
            return
        previous = self.blocks[-1] if self.blocks else None
        if (
            isinstance(previous, Table)
            and self.last_table_page == grid.page - 1
            and len(rows[0]) == len(previous.header)
        ):
            more = rows[1:] if tuple(rows[0]) == previous.header else rows
            self.blocks[-1] = Table(previous.header, previous.rows + tuple(more), _pages([*previous.pages, grid.page]))
        else:
            self.blocks.append(Table(tuple(rows[0]), tuple(rows[1:]), (grid.page,)))
        self.last_table_page = grid.page

    def finish(self, dropped: int) -> Document:
        self._close_heading()
        self._close_section()
        return Document(self.title, None, tuple(self.sections), paged=True, skipped_repeats=dropped)


def _pages(numbers: Iterable[int]) -> Pages:
    return tuple(sorted(set(numbers)))


_HYPHENATED = re.compile(r"[A-Za-z\u00c0-\u024f]-$")


def reflow(lines: Iterable[str]) -> str:
    """Join a paragraph's lines: a word hyphenated at a line's end is joined again, other lines by a space."""
    text = ""
    for line in lines:
        if not text:
            text = line
        elif _HYPHENATED.search(text) and line[:1].islower():
            text = text[:-1] + line
        else:
            text = f"{text} {line}"
    return text
