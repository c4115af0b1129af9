"""Load a tenant's documents into the knowledge base, idempotently, keeping old chunk versions.

A chunk row is never rewritten or deleted here: a changed document supersedes the chunks
it no longer has and adds new versions; a removed one supersedes all of its chunks. Run
records cite (chunk id, version), so what a past run read stays readable until
`retrieval/versions.py` prunes the versions no retained run refers to.
"""

from __future__ import annotations

import hashlib
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
from chatbot.retrieval import queries
from chatbot.retrieval.chunking import Chunk, document_title, split_document
from chatbot.retrieval.normalize import ZWNJ, detect_language, index_form, search_form, ts_config

logger = logging.getLogger(__name__)

SUFFIXES = frozenset({".md", ".markdown", ".txt"})
_MARKDOWN = frozenset({".md", ".markdown"})

Progress = Callable[[int, int], None]
"""Called as `progress(done, total)` after each file."""


@dataclass(slots=True)
class IngestReport:
    """What one ingest changed, counted in documents (and chunks written)."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks_written: int = 0
    document_ids: list[str] = field(default_factory=list)

    def counts(self) -> str:
        """Return the counts on one line, as the CLI prints them (the document ids left out)."""
        return (
            f"added={self.added} updated={self.updated} unchanged={self.unchanged} "
            f"removed={self.removed} chunks_written={self.chunks_written}"
        )


@dataclass(frozen=True, slots=True)
class _SourceFile:
    path: Path
    document_id: str
    source: str


def _walk(paths: Sequence[Path]) -> tuple[list[_SourceFile], set[str]]:
    """Return the files to ingest and the names of the folders that were walked whole."""
    files: list[_SourceFile] = []
    folders: set[str] = set()
    for given in paths:
        root = given.resolve()
        if root.is_dir():
            folders.add(root.name)
            for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES):
                files.append(_SourceFile(path, path.relative_to(root).as_posix(), root.name))
        elif root.is_file():
            files.append(_SourceFile(root, root.name, ""))
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


def _chunk_rows(
    tenant_id: str, doc: _SourceFile, language: str, chunks: list[Chunk], vectors: dict[str, str | None], version: int
) -> Iterator[queries.ChunkInsert]:
    cfg = ts_config(language)
    for chunk in chunks:
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
            "metadata": Jsonb({"source": doc.source, "chars": len(chunk.text)}),
        }


def _unchanged(chunk: Chunk, current: dict[str, tuple[str, int]]) -> bool:
    """Tell whether a current row already holds this chunk's text (by its id) under its heading."""
    return chunk.chunk_id in current and current[chunk.chunk_id][0] == chunk.title


def _title(doc: _SourceFile, text: str) -> str:
    return document_title(text, doc.path.stem.replace("-", " ").replace("_", " "))


def _split(doc: _SourceFile, text: str) -> list[Chunk]:
    return split_document(doc.document_id, _title(doc, text), text, markdown=doc.path.suffix.lower() in _MARKDOWN)


def section_titles(paths: Sequence[Path]) -> dict[str, str]:
    """Return the heading path ingest gives each chunk of these files, by chunk id (read, not stored)."""
    files, _ = _walk(paths)
    return {chunk.chunk_id: chunk.title for doc in files for chunk in _split(doc, doc.path.read_text("utf-8-sig"))}


async def _write_document(
    conn: AsyncConnection[Any], tenant_id: str, doc: _SourceFile, text: str, sha: str, embeddings: Embeddings | None
) -> int:
    """Supersede the document's chunks it no longer has and add the new ones; return rows added."""
    title = _title(doc, text)
    language = detect_language(text)
    chunks = _split(doc, text)
    # Chunk ids are content-derived: a passage whose text and heading are unchanged keeps
    # its current row (and version); only new or retitled passages are embedded and written.
    before = await queries.current_chunks(conn, tenant_id, doc.document_id)
    fresh = [c for c in chunks if not _unchanged(c, before)]
    # Embed before the transaction opens: a slow model call must not hold row locks.
    vectors = dict(zip([c.chunk_id for c in fresh], await _embed(embeddings, fresh), strict=True))
    async with conn.transaction():
        # The document row's lock (taken by the upsert) serialises two ingests of it.
        await queries.upsert_document(
            conn, (tenant_id, doc.document_id, title, doc.source, sha, language, len(chunks), datetime.now(UTC))
        )
        current = await queries.current_chunks(conn, tenant_id, doc.document_id)
        kept = {c.chunk_id: c.ordinal for c in chunks if _unchanged(c, current)}
        await queries.supersede_chunks(conn, tenant_id, doc.document_id, [cid for cid in current if cid not in kept])
        # A kept chunk's position may move; its text and heading, what a run saw, do not.
        moved = [(ordinal, tenant_id, cid) for cid, ordinal in kept.items() if current[cid][1] != ordinal]
        if moved:
            await queries.move_chunks(conn, moved)
        added = [c for c in chunks if c.chunk_id not in kept]
        if added:
            version = await queries.next_version(conn, tenant_id, doc.document_id)
            await queries.insert_chunks(conn, list(_chunk_rows(tenant_id, doc, language, added, vectors, version)))
    return len(added)


async def _remove_documents(conn: AsyncConnection[Any], tenant_id: str, folders: set[str], present: list[str]) -> int:
    """Mark the folders' documents whose file is gone as removed and supersede their chunks."""
    async with conn.transaction():
        removed = await queries.remove_documents(conn, tenant_id, sorted(folders), present)
        if removed:
            await queries.supersede_documents(conn, tenant_id, removed)
    return len(removed)


async def ingest_paths(
    pool: AsyncConnectionPool[Any],
    tenant_id: str,
    paths: Sequence[Path],
    *,
    embeddings: Embeddings | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest files and folders (walked recursively) into one tenant's knowledge base.

    Unchanged files are left alone (same chunk ids), changed ones are re-chunked, and
    documents that came from an ingested folder but whose file is gone are removed; the
    chunks they no longer have are superseded, not deleted (see the module docstring).
    Document ids are paths relative to the folder given.
    """
    # The token's rule (caller.py), whole string: "x\n" is no tenant any token can name.
    check_caller_id(tenant_id, "tenant id")
    files, folders = _walk(paths)
    report = IngestReport()
    async with pool.connection() as conn:
        known = await queries.known_documents(conn, tenant_id)
        for done, doc in enumerate(files, start=1):
            text = doc.path.read_text(encoding="utf-8-sig")
            sha = hashlib.sha256(text.encode()).hexdigest()
            report.document_ids.append(doc.document_id)
            if known.get(doc.document_id) == sha:
                report.unchanged += 1
            else:
                report.chunks_written += await _write_document(conn, tenant_id, doc, text, sha, embeddings)
                if doc.document_id in known:
                    report.updated += 1
                else:
                    report.added += 1
            if progress is not None:
                progress(done, len(files))
        if folders:
            report.removed = await _remove_documents(conn, tenant_id, folders, report.document_ids)
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
        },
    )
    return report


async def document_count(pool: AsyncConnectionPool[Any], tenant_id: str) -> int:
    """Return how many documents the tenant's knowledge base holds (0: none was ingested)."""
    async with pool.connection() as conn:
        return len(await queries.known_documents(conn, tenant_id))
