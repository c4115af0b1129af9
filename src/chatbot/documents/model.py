"""The one typed result every reader returns, and the one error a file that is not taken raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Pages = tuple[int, ...]
"""1-based page numbers a block came from, ascending; () for formats without pages."""


@dataclass(frozen=True, slots=True)
class Paragraph:
    """Running text, re-flowed: one paragraph, its lines joined (hyphenation across lines undone)."""

    text: str
    pages: Pages = ()


@dataclass(frozen=True, slots=True)
class ListItem:
    """One item of a bulleted or numbered list, without its bullet."""

    text: str
    pages: Pages = ()


@dataclass(frozen=True, slots=True)
class Table:
    """A table as rows under their header, so each row can be read alone ("column: value")."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    pages: Pages = ()

    def row_lines(self) -> list[str]:
        """Return one line per row, each cell named by its column: `column: value; column: value`."""
        lines = []
        for row in self.rows:
            cells = [f"{name}: {value}" if name else value for name, value in zip(self.header, row, strict=False)]
            cells.extend(row[len(self.header) :])  # a row wider than its header keeps its extra cells
            lines.append("; ".join(c for c in cells if c.strip()))
        return lines


Block = Paragraph | ListItem | Table


@dataclass(frozen=True, slots=True)
class Section:
    """The blocks under one heading path (outermost heading first; () before the first heading)."""

    headings: tuple[str, ...]
    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class Document:
    """What a reader found in one file."""

    title: str | None
    """The document's own title (first top-level heading, `<title>`, core properties), if any."""
    language: str | None
    """A BCP 47 primary tag the file declares (`lang`, `w:lang`), or None: ingest detects it."""
    sections: tuple[Section, ...]
    paged: bool = False
    """True for formats with pages (PDF): every block carries its pages."""
    skipped_repeats: int = field(default=0, compare=False)
    """Running headers, footers and page numbers dropped because they repeat on every page."""


Reason = Literal["unsupported", "encrypted", "scanned", "corrupt", "too_large", "too_complex", "timeout", "crashed"]
"""Why a file is not taken; the CLI prints it beside the file's name."""


class Unreadable(Exception):
    """A file that is not taken, with its reason and one line saying why (no file content in it)."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: Reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """Bounds on what one file may cost; every reader checks the ones that apply to it."""

    max_bytes: int = 100 * 1024 * 1024
    """A file larger than this is refused before it is opened (`too_large`)."""
    max_pages: int = 5_000
    """A PDF with more pages is refused before its text is read (`too_large`)."""
    max_unpacked_bytes: int = 200 * 1024 * 1024
    """A DOCX whose parts unpack to more than this is refused (a zip bomb) (`too_large`)."""
    max_nesting: int = 32
    """Tables (or HTML elements) nested deeper are refused (`too_complex`)."""
    max_text_chars: int = 50_000_000
    """A document whose text runs longer than this is refused (`too_large`)."""
    max_blocks: int = 500_000
    """A document of more paragraphs, list items and table rows than this is refused (`too_large`):
    each costs memory beyond its text, so a page of millions of one-word paragraphs is bounded too."""
    max_elements: int = 2_000_000
    """Markup elements (HTML tags) a file may hold (`too_complex`): each costs time to walk, even an empty one."""
    seconds: float = 120.0
    """Wall-clock time one file may take to read (`timeout`)."""
