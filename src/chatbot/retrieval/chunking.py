"""Split a document into titled chunks with stable, content-derived ids."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter

# Sized so a chunk is one answerable section (a short FAQ answer or a list of required
# documents): small enough that the offline responder can quote it whole, large enough
# that a figure stays next to what it is about.
CHUNK_SIZE = 900
CHUNK_OVERLAP = 120

_HEADERS = [("#", "h1"), ("##", "h2"), ("###", "h3")]
# Persian sentences end in "." or "؟" and list items in "،" / "؛": without these the
# splitter would cut Persian text mid-sentence at a space.
_SEPARATORS = ["\n\n", "\n", ". ", "؟ ", "? ", "! ", "؛ ", "، ", "; ", ", ", " ", ""]
# MarkdownHeaderTextSplitter drops every non-printable character, and the zero-width
# non-joiner (U+200C) is one: Persian text would come out misspelt ("میتوانید" for
# "می‌توانید"). It travels through the splitter as a rare printable stand-in instead.
_ZWNJ = "\u200c"
_ZWNJ_STAND_IN = "\u2058"
_TITLE_LINE = re.compile(r"^\s*#\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One searchable piece of a document."""

    chunk_id: str
    ordinal: int
    title: str
    text: str


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


def _sections(text: str, markdown: bool) -> list[tuple[list[str], str]]:
    if not markdown:
        return [([], text)]
    splitter = MarkdownHeaderTextSplitter(_HEADERS, strip_headers=True)
    sections = []
    for doc in splitter.split_text(text.replace(_ZWNJ, _ZWNJ_STAND_IN)):
        found = [str(doc.metadata[key]) for _, key in _HEADERS if key in doc.metadata]
        headings = [h.replace(_ZWNJ_STAND_IN, _ZWNJ) for h in found]
        sections.append((headings, doc.page_content.replace(_ZWNJ_STAND_IN, _ZWNJ)))
    return sections


def split_document(document_id: str, title: str, text: str, *, markdown: bool = True) -> list[Chunk]:
    """Split `text` by Markdown headings, then by size, into chunks titled by their heading path."""
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, separators=_SEPARATORS, keep_separator="end"
    )
    chunks: list[Chunk] = []
    seen: dict[str, int] = {}
    for headings, body in _sections(text, markdown):
        # The document title is the first heading already; don't repeat it in the path.
        path = [h for h in headings if h != title]
        chunk_title = " › ".join([title, *path])
        for piece in splitter.split_text(body):
            piece = piece.strip()
            if not piece:
                continue
            occurrence = seen.get(piece, 0)
            seen[piece] = occurrence + 1
            chunk_id = chunk_id_for(document_id, piece, occurrence)
            chunks.append(Chunk(chunk_id, len(chunks), chunk_title, piece))
    return chunks
