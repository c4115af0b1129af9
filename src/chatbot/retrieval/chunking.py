"""Split a document into titled chunks with stable, content-derived ids.

Two inputs, one splitter: Markdown or text as written (`split_document`), and the typed
`Document` a reader returns (`split_structured`: its sections' heading paths, paragraphs,
list items and table rows, each block's pages). Nothing here knows a file format.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter

from chatbot.documents.model import Block, Document, ListItem, Pages, Table

# Sized so a chunk is one answerable section (a short FAQ answer or a list of required
# documents): small enough that the offline responder can quote it whole, large enough
# that a figure stays next to what it is about.
CHUNK_SIZE = 900
CHUNK_OVERLAP = 120

_HEADERS = [("#", "h1"), ("##", "h2"), ("###", "h3")]
# Persian sentences end in "." or "؟" and list items in "،" / "؛": without these the
# splitter would cut Persian text mid-sentence at a space.
_SEPARATORS = ["\n\n", "\n", ". ", "؟ ", "? ", "! ", "؛ ", "، ", "; ", ", ", " ", ""]
# MarkdownHeaderTextSplitter drops every non-printable character of a line: the zero-width
# non-joiner (Persian would come out misspelt, "میتوانید" for "می‌توانید") and joiner, line
# and paragraph separators (U+2028, U+2029, U+0085), byte-order marks, bidi controls, tabs,
# no-break spaces (a figure "10 000" would become "10000"). Answers quote chunks as written,
# so such characters travel through the splitter as printable stand-ins that the document
# does not contain (one code point each, so sizes are unchanged) and come back afterwards.
# Search reads a normalised copy (retrieval/ingest.py); the stored text is the document's.
_STAND_INS = range(0x20000, 0x2A6E0)  # CJK Extension B: printable letters, not whitespace
_MARKERS = ("#", "```", "~~~")  # what the splitter looks for at the start of a stripped line
_TITLE_LINE = re.compile(r"^\s*#\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One searchable piece of a document."""

    chunk_id: str
    ordinal: int
    title: str
    text: str
    pages: Pages = ()
    """The 1-based pages of the blocks the text came from; () for a document without pages."""


def document_title(text: str, fallback: str) -> str:
    """Return the first level-one Markdown heading, or `fallback` when there is none."""
    match = _TITLE_LINE.search(text)
    return match.group(1).strip() if match else fallback


def chunk_id_for(document_id: str, text: str, occurrence: int) -> str:
    """Return the id of a chunk: document id plus a hash of its text (and repeat count).

    Derived from content alone, so re-ingesting unchanged text yields the same ids and
    citations in old transcripts keep pointing at the same passage.
    """
    digest = hashlib.sha256(f"{document_id}\x00{occurrence}\x00{text}".encode()).hexdigest()[:16]
    return f"{document_id}#{digest}"


def _protect_line(line: str, stand_in: dict[int, str]) -> str:
    """Return `line` with its hidden characters as stand-ins, except where the splitter trims it.

    The line's leading and trailing whitespace stays as it is (the splitter strips it, as it
    trims every line), and so do invisible characters in front of a heading or fence marker
    (a right-to-left mark before "#" must not turn a heading into text).
    """
    start, end = len(line) - len(line.lstrip()), len(line.rstrip())
    lead = start
    while lead < end and not line[lead].isprintable():
        lead += 1
    if line.startswith(_MARKERS, lead):
        start = lead
    return line[:start] + line[start:end].translate(stand_in) + line[end:]


def _sections(text: str, markdown: bool) -> list[tuple[list[str], str]]:
    if not markdown:
        return [([], text)]
    splitter = MarkdownHeaderTextSplitter(_HEADERS, strip_headers=True)
    hidden = sorted({c for c in text if c != "\n" and not c.isprintable()})
    present = set(text)
    free = (chr(cp) for cp in _STAND_INS if chr(cp) not in present)
    stand_in = {ord(c): next(free) for c in hidden}
    back = {ord(s): c for c, s in zip(hidden, stand_in.values(), strict=True)}
    if stand_in:
        text = "\n".join(_protect_line(line, stand_in) for line in text.split("\n"))
    sections = []
    for doc in splitter.split_text(text):
        found = [str(doc.metadata[key]) for _, key in _HEADERS if key in doc.metadata]
        sections.append(([h.translate(back) for h in found], doc.page_content.translate(back)))
    return sections


def _splitter() -> RecursiveCharacterTextSplitter:
    return RecursiveCharacterTextSplitter(
        chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, separators=_SEPARATORS, keep_separator="end"
    )


def _heading_title(title: str, headings: tuple[str, ...] | list[str]) -> str:
    # The document title is the first heading already; don't repeat it in the path.
    return " › ".join([title, *(h for h in headings if h != title)])


class _Chunks:
    """Chunks as they are cut, numbered, each id counting earlier chunks of the same text."""

    def __init__(self, document_id: str) -> None:
        self.document_id = document_id
        self.chunks: list[Chunk] = []
        self.seen: dict[str, int] = {}

    def add(self, title: str, piece: str, pages: Pages = ()) -> None:
        piece = piece.strip()
        if not piece:
            return
        occurrence = self.seen.get(piece, 0)
        self.seen[piece] = occurrence + 1
        chunk_id = chunk_id_for(self.document_id, piece, occurrence)
        self.chunks.append(Chunk(chunk_id, len(self.chunks), title, piece, pages))


def split_document(document_id: str, title: str, text: str, *, markdown: bool = True) -> list[Chunk]:
    """Split `text` by Markdown headings, then by size, into chunks titled by their heading path."""
    splitter = _splitter()
    out = _Chunks(document_id)
    for headings, body in _sections(text, markdown):
        chunk_title = _heading_title(title, headings)
        for piece in splitter.split_text(body):
            out.add(chunk_title, piece)
    return out.chunks


def block_text(block: Block) -> str:
    """Return a block as a chunk holds it: a list item as "- item", a table one "column: value; ..." line per row."""
    if isinstance(block, Table):
        return "\n".join(block.row_lines() or ["; ".join(h for h in block.header if h.strip())])
    if isinstance(block, ListItem):
        return f"- {block.text}"
    return block.text


def _section_body(blocks: tuple[Block, ...]) -> tuple[str, list[tuple[int, int, Pages]]]:
    """Return a section's text and, for each block, its span in it and its pages."""
    parts: list[str] = []
    spans: list[tuple[int, int, Pages]] = []
    at = 0
    previous: Block | None = None
    for block in blocks:
        text = block_text(block).strip()
        if not text:
            continue
        if previous is not None:
            # Items of one list stay on consecutive lines; anything else is its own paragraph.
            gap = "\n" if isinstance(block, ListItem) and isinstance(previous, ListItem) else "\n\n"
            parts.append(gap)
            at += len(gap)
        parts.append(text)
        spans.append((at, at + len(text), block.pages))
        at += len(text)
        previous = block
    return "".join(parts), spans


def split_structured(document_id: str, title: str, document: Document) -> list[Chunk]:
    """Split a reader's Document into chunks titled by each section's heading path, with their pages.

    Each section is cut by size as Markdown sections are (the same splitter, so the same
    overlap), and a chunk carries the pages of every block its text overlaps.
    """
    splitter = _splitter()
    out = _Chunks(document_id)
    for section in document.sections:
        body, spans = _section_body(section.blocks)
        chunk_title = _heading_title(title, section.headings)
        start, previous_length = 0, 0
        for piece in splitter.split_text(body):
            # Where the piece starts, found as the splitter's own start index finds it.
            found = body.find(piece, max(0, start + previous_length - CHUNK_OVERLAP))
            start, previous_length = (found, len(piece)) if found >= 0 else (0, len(body))
            end = start + previous_length
            pages = sorted({p for s, e, block_pages in spans if s < end and e > start for p in block_pages})
            out.add(chunk_title, piece, tuple(pages))
    return out.chunks


def structured_text(document: Document) -> str:
    """Return the text of a reader's Document as its chunks hold it (to tell its language)."""
    return "\n\n".join(_section_body(section.blocks)[0] for section in document.sections)
