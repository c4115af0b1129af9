"""Load a tenant's documents into the knowledge base, idempotently, keeping old chunk versions.

A chunk row is never rewritten or deleted here: a changed document supersedes the chunks
it no longer has and adds new versions; a removed one supersedes all of its chunks. Run
records cite (chunk id, version), so what a past run read stays readable until
`retrieval/versions.py` prunes the versions no retained run refers to.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from chatbot.caller import check_caller_id
from chatbot.config import Settings
from chatbot.documents.model import Document, ReadLimits, Reason, Unreadable
from chatbot.documents.reader import DocumentReader, Found
from chatbot.ids import TenantId
from chatbot.retrieval import queries
from chatbot.retrieval.chunking import Chunk, document_title, split_document, split_structured, structured_text
from chatbot.retrieval.normalize import ZWNJ, detect_language, index_form, search_form, ts_config

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""Called as `progress(done, total)` after each file (taken or skipped)."""
PagesRead = Callable[[int], None]
"""Called with the page count of each paged document read (a PDF), for a progress display."""

# How the CLI names each reason a file is not taken.
REASON_WORDS: dict[Reason, str] = {
    "unsupported": "unsupported type",
    "encrypted": "encrypted",
    "scanned": "scanned: needs OCR",
    "corrupt": "corrupt",
    "too_large": "too large",
    "too_complex": "too complex",
    "timeout": "timeout",
    "crashed": "crashed",
}
# Languages search has a configuration for; a document declaring another is detected instead.
_DECLARED_LANGUAGES = frozenset({"fa", "en"})


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file ingest did not take, and why; its document, if it had one, stays as it was."""

    path: Path
    reason: Reason
    detail: str

    def line(self) -> str:
        """Return the line the CLI prints on standard error for it."""
        return f"skipped {self.path}: {REASON_WORDS[self.reason]} ({self.detail})"


@dataclass(slots=True)
class IngestReport:
    """What one ingest changed, counted in documents (and chunks written), and the files it skipped."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks_written: int = 0
    pages: int = 0
    document_ids: list[str] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)

    def counts(self) -> str:
        """Return the counts on one line, as the CLI prints them (the document ids left out)."""
        return (
            f"added={self.added} updated={self.updated} unchanged={self.unchanged} "
            f"removed={self.removed} chunks_written={self.chunks_written} skipped={len(self.skipped)}"
        )


@dataclass(frozen=True, slots=True)
class _SourceFile:
    path: Path
    document_id: str
    source: str
    shown: Path
    """The path as the operator gave it (a folder given, then the file under it)."""


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A document cut into chunks, ready to write: its title, language and whether it has pages."""

    title: str
    language: str
    chunks: list[Chunk]
    paged: bool = False


def document_reader(settings: Settings) -> DocumentReader:
    """Return a reader bounded by the `CHATBOT_INGEST_*` settings (close it, or use it in `with`)."""
    limits = ReadLimits(
        max_bytes=settings.ingest_max_bytes,
        max_pages=settings.ingest_max_pages,
        max_unpacked_bytes=settings.ingest_max_unpacked_bytes,
        max_nesting=settings.ingest_max_nesting,
        max_text_chars=settings.ingest_max_text_chars,
        max_blocks=settings.ingest_max_blocks,
        max_elements=settings.ingest_max_elements,
        seconds=settings.ingest_timeout_seconds,
    )
    return DocumentReader(limits, memory_bytes=settings.ingest_max_memory_mb * 1024**2)


IGNORE_FILE = ".ingestignore"
"""A folder's list of files ingest does not walk: one glob a line (`eval.jsonl`, `drafts/*`), `#` comments."""


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _ignored_patterns(root: Path) -> list[str]:
    listed = root / IGNORE_FILE
    if not listed.is_file():
        return []
    lines = (line.strip() for line in listed.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _ignored(relative: Path, patterns: list[str]) -> bool:
    return any(relative.match(pattern) or fnmatch.fnmatch(relative.as_posix(), pattern) for pattern in patterns)


def _walk(paths: Sequence[Path]) -> tuple[list[_SourceFile], set[str]]:
    """Return the files to ingest and the names of the folders that were walked whole.

    A folder gives every file under it but hidden ones (a name starting with a dot, or under
    such a folder: `.DS_Store`, `.git/`) and those its `.ingestignore` lists (the operator
    said so); what cannot be read is reported, not left out.
    """
    files: list[_SourceFile] = []
    folders: set[str] = set()
    for given in paths:
        root = given.resolve()
        if root.is_dir():
            folders.add(root.name)
            ignored = _ignored_patterns(root)
            for path in sorted(p for p in root.rglob("*") if p.is_file() and not _hidden(p, root)):
                relative = path.relative_to(root)
                if _ignored(relative, ignored):
                    continue
                files.append(_SourceFile(path, relative.as_posix(), root.name, given / relative))
        elif root.is_file():
            files.append(_SourceFile(root, root.name, "", given))
        else:
            raise FileNotFoundError(f"no such file or folder: {given}")
    ids = [f.document_id for f in files]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise ValueError(f"two files map to the same document id: {sorted(duplicates)[:3]}")
    return files, folders


def searchable(text: str) -> str:
    """Return the copy of stored text that search reads: invisible characters out, separators as spaces.

    The stored chunk is the document as written (chunking.py keeps every character), but a
    word written with a joiner, a byte-order mark or a bidi control inside is the word a user
    types without it: format characters (Unicode category Cf) are dropped, except the
    zero-width non-joiner, which `search_form` and `index_form` read as the Persian compound
    mark. Line and paragraph separators become line breaks; tabs, no-break and other spaces
    and control characters become spaces.
    """
    if text.isprintable() or all(c == "\n" or c.isprintable() for c in text):
        return text
    kept = []
    for c in text:
        if c == "\n" or c == ZWNJ or c.isprintable():
            kept.append(c)
        elif c in "\u2028\u2029\x85":
            kept.append("\n")
        elif unicodedata.category(c) != "Cf":
            kept.append(" ")
    return "".join(kept)


def _vector_literal(values: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


async def _embed(embeddings: Embeddings | None, chunks: list[Chunk]) -> list[str | None]:
    if embeddings is None or not chunks:
        return [None] * len(chunks)
    vectors = await embeddings.aembed_documents([searchable(f"{c.title}\n{c.text}") for c in chunks])
    return [_vector_literal(v) for v in vectors]


def _stored_pages(chunk: Chunk, paged: bool) -> list[int] | None:
    """Return the pages kept with a chunk: its pages for a paged document, None for one without pages."""
    return list(chunk.pages) if paged else None


def _chunk_rows(
    tenant_id: TenantId,
    doc: _SourceFile,
    prepared: _Prepared,
    chunks: list[Chunk],
    vectors: dict[str, str | None],
    version: int,
) -> Iterator[queries.ChunkInsert]:
    language = prepared.language
    cfg = ts_config(language)
    for chunk in chunks:
        metadata: dict[str, object] = {"source": doc.source, "chars": len(chunk.text)}
        if prepared.paged:
            metadata["pages"] = _stored_pages(chunk, prepared.paged)
        yield {
            "tenant": tenant_id,
            "chunk_id": chunk.chunk_id,
            "version": version,
            "document_id": doc.document_id,
            "ordinal": chunk.ordinal,
            "title": chunk.title,
            "text": chunk.text,
            "language": language,
            # Stored as written; searched on the normalised form.
            "search_text": search_form(searchable(f"{chunk.title}\n{chunk.text}")),
            "cfg": cfg,
            "title_index": index_form(searchable(chunk.title)),
            "text_index": index_form(searchable(chunk.text)),
            "embedding": vectors.get(chunk.chunk_id),
            "metadata": Jsonb(metadata),
        }


def _unchanged(chunk: Chunk, paged: bool, current: dict[str, queries.CurrentChunk]) -> bool:
    """Tell whether a current row already holds this chunk's text (by its id) under its heading, on its pages."""
    row = current.get(chunk.chunk_id)
    return row is not None and row.title == chunk.title and row.pages == _stored_pages(chunk, paged)


def _fallback_title(doc: _SourceFile) -> str:
    return doc.path.stem.replace("-", " ").replace("_", " ")


def _prepare(doc: _SourceFile, found: Found, document: Document | None) -> _Prepared:
    """Cut a recognised file into chunks: its text as written, or the Document its reader returned."""
    if document is None:
        text = found.text or ""
        title = document_title(text, _fallback_title(doc))
        chunks = split_document(doc.document_id, title, text, markdown=found.markdown)
        return _Prepared(title, detect_language(text), chunks)
    title = document.title or _fallback_title(doc)
    declared = (document.language or "").split("-")[0].lower()
    language = declared if declared in _DECLARED_LANGUAGES else detect_language(structured_text(document))
    return _Prepared(title, language, split_structured(doc.document_id, title, document), document.paged)


def section_titles(paths: Sequence[Path]) -> dict[str, str]:
    """Return the heading path ingest gives each chunk of these files, by chunk id (read, not stored).

    Files that cannot be read are left out here: ingest is what reports them.
    """
    files, _ = _walk(paths)
    titles: dict[str, str] = {}
    with DocumentReader() as reader:
        for doc in files:
            try:
                found = reader.recognise(doc.path)
                prepared = _prepare(doc, found, None if found.text is not None else reader.read(found))
            except Unreadable:
                continue
            titles.update((chunk.chunk_id, chunk.title) for chunk in prepared.chunks)
    return titles


async def _write_document(
    conn: AsyncConnection[Any],
    tenant_id: TenantId,
    doc: _SourceFile,
    prepared: _Prepared,
    sha: str,
    embeddings: Embeddings | None,
) -> int:
    """Supersede the document's chunks it no longer has and add the new ones; return rows added."""
    title, language, chunks, paged = prepared.title, prepared.language, prepared.chunks, prepared.paged
    # Chunk ids are content-derived: a passage whose text and heading are unchanged keeps
    # its current row (and version); only new or retitled passages are embedded and written.
    before = await queries.current_chunks(conn, tenant_id, doc.document_id)
    fresh = [c for c in chunks if not _unchanged(c, paged, before)]
    # Embed before the transaction opens: a slow model call must not hold row locks.
    vectors = dict(zip([c.chunk_id for c in fresh], await _embed(embeddings, fresh), strict=True))
    async with conn.transaction():
        # The document row's lock (taken by the upsert) serialises two ingests of it.
        await queries.upsert_document(
            conn, (tenant_id, doc.document_id, title, doc.source, sha, language, len(chunks), datetime.now(UTC))
        )
        current = await queries.current_chunks(conn, tenant_id, doc.document_id)
        kept = {c.chunk_id: c.ordinal for c in chunks if _unchanged(c, paged, current)}
        await queries.supersede_chunks(conn, tenant_id, doc.document_id, [cid for cid in current if cid not in kept])
        # A kept chunk's position may move; its text and heading, what a run saw, do not.
        moved = [(ordinal, tenant_id, cid) for cid, ordinal in kept.items() if current[cid].ordinal != ordinal]
        if moved:
            await queries.move_chunks(conn, moved)
        added = [c for c in chunks if c.chunk_id not in kept]
        if added:
            version = await queries.next_version(conn, tenant_id, doc.document_id)
            await queries.insert_chunks(conn, list(_chunk_rows(tenant_id, doc, prepared, added, vectors, version)))
    return len(added)


async def _remove_documents(
    conn: AsyncConnection[Any], tenant_id: TenantId, folders: set[str], present: list[str]
) -> int:
    """Mark the folders' documents whose file is gone as removed and supersede their chunks."""
    async with conn.transaction():
        removed = await queries.remove_documents(conn, tenant_id, sorted(folders), present)
        if removed:
            await queries.supersede_documents(conn, tenant_id, removed)
    return len(removed)


async def ingest_paths(
    pool: AsyncConnectionPool[Any],
    tenant_id: TenantId,
    paths: Sequence[Path],
    *,
    embeddings: Embeddings | None = None,
    progress: Progress | None = None,
    reader: DocumentReader | None = None,
    on_skip: Callable[[SkippedFile], None] | None = None,
    pages_read: PagesRead | None = None,
) -> IngestReport:
    """Ingest files and folders (walked recursively) into one tenant's knowledge base.

    Unchanged files are left alone (same chunk ids), changed ones are re-chunked, and
    documents that came from an ingested folder but whose file is gone are removed; the
    chunks they no longer have are superseded, not deleted (see the module docstring).
    Document ids are paths relative to the folder given. A file that cannot be read (too
    large, unsupported, corrupt, a reader that failed: `documents/reader.py`) is skipped:
    reported to `on_skip` and in the report, and its document, if it had one, keeps its
    current version (it is neither rewritten nor removed). `reader` bounds and reads the
    files (its limits, its worker process); without one, a reader with the default limits.
    """
    # The token's rule (caller.py), whole string: "x\n" is no tenant any token can name.
    check_caller_id(tenant_id, "tenant id")
    files, folders = _walk(paths)
    report = IngestReport()
    present: list[str] = []
    with contextlib.ExitStack() as stack:
        if reader is None:
            reader = stack.enter_context(DocumentReader())
        async with pool.connection() as conn:
            known = await queries.known_documents(conn, tenant_id)
            for done, doc in enumerate(files, start=1):
                present.append(doc.document_id)  # a file that fails keeps its document
                try:
                    await _ingest_file(conn, tenant_id, doc, reader, known, report, embeddings, pages_read)
                except Unreadable as exc:
                    skipped = SkippedFile(doc.shown, exc.reason, exc.detail)
                    report.skipped.append(skipped)
                    if on_skip is not None:
                        on_skip(skipped)
                if progress is not None:
                    progress(done, len(files))
            if folders:
                report.removed = await _remove_documents(conn, tenant_id, folders, present)
            if report.added or report.updated or report.removed:
                await queries.refresh_vocabulary(conn, tenant_id)
    logger.info(
        "ingest finished",
        extra={
            "tenant_id": tenant_id,
            "added": report.added,
            "updated": report.updated,
            "unchanged": report.unchanged,
            "removed": report.removed,
            "skipped": len(report.skipped),
        },
    )
    return report


async def _ingest_file(
    conn: AsyncConnection[Any],
    tenant_id: TenantId,
    doc: _SourceFile,
    reader: DocumentReader,
    known: dict[str, str],
    report: IngestReport,
    embeddings: Embeddings | None,
    pages_read: PagesRead | None,
) -> None:
    """Take one file: count it unchanged, or read, cut and write it (`Unreadable` before any write)."""
    # Reading blocks (a file, a worker process): off the event loop.
    found = await asyncio.to_thread(reader.recognise, doc.path)
    if known.get(doc.document_id) == found.fingerprint:
        report.unchanged += 1
        report.document_ids.append(doc.document_id)
        return
    document = None if found.text is not None else await asyncio.to_thread(reader.read, found)
    prepared = _prepare(doc, found, document)
    if document is not None and document.paged:
        pages = max((p for s in document.sections for b in s.blocks for p in b.pages), default=0)
        report.pages += pages
        if pages_read is not None:
            pages_read(pages)
    report.chunks_written += await _write_document(conn, tenant_id, doc, prepared, found.fingerprint, embeddings)
    report.document_ids.append(doc.document_id)
    if doc.document_id in known:
        report.updated += 1
    else:
        report.added += 1


async def document_count(pool: AsyncConnectionPool[Any], tenant_id: TenantId) -> int:
    """Return how many documents the tenant's knowledge base holds (0: none was ingested)."""
    async with pool.connection() as conn:
        return len(await queries.known_documents(conn, tenant_id))
