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
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from chatbot.caller import check_caller_id
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


_INSERT_CHUNK = """
INSERT INTO kb_chunks (tenant_id, chunk_id, version, document_id, ordinal, title, text, language,
                       search_text, tsv, embedding, metadata)
VALUES (%(tenant)s, %(chunk_id)s, %(version)s, %(document_id)s, %(ordinal)s, %(title)s, %(text)s, %(language)s,
        %(search_text)s,
        setweight(to_tsvector(%(cfg)s::regconfig, %(title_index)s), 'A')
          || to_tsvector(%(cfg)s::regconfig, %(text_index)s),
        %(embedding)s::vector, %(metadata)s)
"""

# The time is a parameter: Citus refuses now() in `DO UPDATE SET` on a distributed table.
_UPSERT_DOCUMENT = """
INSERT INTO kb_documents (tenant_id, document_id, title, source, content_sha, language, chunk_count, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (tenant_id, document_id) DO UPDATE
SET title = EXCLUDED.title, source = EXCLUDED.source, content_sha = EXCLUDED.content_sha,
    language = EXCLUDED.language, chunk_count = EXCLUDED.chunk_count, updated_at = EXCLUDED.updated_at,
    removed_at = NULL
"""

_CURRENT_CHUNKS = """
SELECT chunk_id, title, ordinal FROM kb_chunks
WHERE tenant_id = %s AND document_id = %s AND superseded_at IS NULL
"""
_SUPERSEDE = """
UPDATE kb_chunks SET superseded_at = now()
WHERE tenant_id = %s AND document_id = %s AND superseded_at IS NULL AND chunk_id = ANY(%s)
"""
_NEXT_VERSION = "SELECT coalesce(max(version), 0) + 1 AS v FROM kb_chunks WHERE tenant_id = %s AND document_id = %s"
_REMOVE_DOCUMENTS = """
UPDATE kb_documents SET removed_at = now(), chunk_count = 0, updated_at = now()
WHERE tenant_id = %s AND source = ANY(%s) AND NOT document_id = ANY(%s) AND removed_at IS NULL
RETURNING document_id
"""


def _chunk_rows(
    tenant_id: str, doc: _SourceFile, language: str, chunks: list[Chunk], vectors: dict[str, str | None], version: int
) -> Iterator[dict[str, Any]]:
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


async def _current_chunks(conn: AsyncConnection[Any], tenant_id: str, document_id: str) -> dict[str, tuple[str, int]]:
    cur = await conn.execute(_CURRENT_CHUNKS, (tenant_id, document_id))
    return {row["chunk_id"]: (row["title"], row["ordinal"]) for row in await cur.fetchall()}


def _unchanged(chunk: Chunk, current: dict[str, tuple[str, int]]) -> bool:
    """Tell whether a current row already holds this chunk's text (by its id) under its heading."""
    return chunk.chunk_id in current and current[chunk.chunk_id][0] == chunk.title


async def _write_document(
    conn: AsyncConnection[Any], tenant_id: str, doc: _SourceFile, text: str, sha: str, embeddings: Embeddings | None
) -> int:
    """Supersede the document's chunks it no longer has and add the new ones; return rows added."""
    title = document_title(text, doc.path.stem.replace("-", " ").replace("_", " "))
    language = detect_language(text)
    chunks = split_document(doc.document_id, title, text, markdown=doc.path.suffix.lower() in _MARKDOWN)
    # Chunk ids are content-derived: a passage whose text and heading are unchanged keeps
    # its current row (and version); only new or retitled passages are embedded and written.
    before = await _current_chunks(conn, tenant_id, doc.document_id)
    fresh = [c for c in chunks if not _unchanged(c, before)]
    # Embed before the transaction opens: a slow model call must not hold row locks.
    vectors = dict(zip([c.chunk_id for c in fresh], await _embed(embeddings, fresh), strict=True))
    async with conn.transaction():
        # The document row's lock (taken by the upsert) serialises two ingests of it.
        await conn.execute(
            _UPSERT_DOCUMENT,
            (tenant_id, doc.document_id, title, doc.source, sha, language, len(chunks), datetime.now(UTC)),
        )
        current = await _current_chunks(conn, tenant_id, doc.document_id)
        kept = {c.chunk_id: c.ordinal for c in chunks if _unchanged(c, current)}
        await conn.execute(_SUPERSEDE, (tenant_id, doc.document_id, [cid for cid in current if cid not in kept]))
        # A kept chunk's position may move; its text and heading, what a run saw, do not.
        moved = [(ordinal, tenant_id, cid) for cid, ordinal in kept.items() if current[cid][1] != ordinal]
        async with conn.cursor() as cur:
            if moved:
                await cur.executemany(
                    "UPDATE kb_chunks SET ordinal = %s"
                    " WHERE tenant_id = %s AND chunk_id = %s AND superseded_at IS NULL",
                    moved,
                )
            added = [c for c in chunks if c.chunk_id not in kept]
            if added:
                row = await (await conn.execute(_NEXT_VERSION, (tenant_id, doc.document_id))).fetchone()
                version = int(row["v"]) if row else 1
                await cur.executemany(
                    _INSERT_CHUNK, list(_chunk_rows(tenant_id, doc, language, added, vectors, version))
                )
    return len(added)


async def _remove_documents(conn: AsyncConnection[Any], tenant_id: str, folders: set[str], present: list[str]) -> int:
    """Mark the folders' documents whose file is gone as removed and supersede their chunks."""
    async with conn.transaction():
        cur = await conn.execute(_REMOVE_DOCUMENTS, (tenant_id, sorted(folders), present))
        removed = [row["document_id"] for row in await cur.fetchall()]
        if removed:
            await conn.execute(
                "UPDATE kb_chunks SET superseded_at = now()"
                " WHERE tenant_id = %s AND document_id = ANY(%s) AND superseded_at IS NULL",
                (tenant_id, removed),
            )
    return len(removed)


async def refresh_vocabulary(conn: AsyncConnection[Any], tenant_id: str) -> None:
    """Rebuild the tenant's lexeme table (term, chunk frequency) from its chunks."""
    stat_query = sql.SQL("SELECT tsv FROM kb_chunks WHERE tenant_id = {} AND superseded_at IS NULL").format(
        sql.Literal(tenant_id)
    )
    async with conn.transaction():
        # Two ingests of one tenant at once would otherwise interleave delete and insert.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('kb_terms'), hashtext(%s))", (tenant_id,))
        await conn.execute("DELETE FROM kb_terms WHERE tenant_id = %s", (tenant_id,))
        await conn.execute(
            "INSERT INTO kb_terms (tenant_id, term, ndoc) SELECT %s, word, ndoc FROM ts_stat(%s)",
            (tenant_id, stat_query.as_string(conn)),
        )


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
        cur = await conn.execute(
            "SELECT document_id, content_sha FROM kb_documents WHERE tenant_id = %s AND removed_at IS NULL",
            (tenant_id,),
        )
        known = {row["document_id"]: row["content_sha"] for row in await cur.fetchall()}
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
            await refresh_vocabulary(conn, tenant_id)
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
