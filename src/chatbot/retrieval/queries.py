"""The retrieval feature's own SQL: `kb_documents`, `kb_chunks` and `kb_terms`.

Statements as module constants beside the small functions that run them on a connection
the caller passes in (AGENTS.md, "Where SQL lives"): ingest's writes (retrieval/ingest.py),
the one search statement (retrieval/search.py, whose docstring explains its ranking), and
the chunk versions run records cite (retrieval/versions.py). The statement on the
checkpoints that finds cited versions is db/langgraph_tables.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NamedTuple, TypedDict

from psycopg import sql
from psycopg.abc import Params
from psycopg.types.json import Jsonb
from pydantic import TypeAdapter

from chatbot.db.connection_options import Conn
from chatbot.db.langgraph_tables import CITED_CHUNK_VERSIONS
from chatbot.db.transaction_locks import hold_vocabulary
from chatbot.ids import TenantId
from chatbot.responses import QuotedChunk


class ChunkInsert(TypedDict):
    """INSERT_CHUNK's parameters: one chunk version with its index forms (ingest.py builds them)."""

    tenant: TenantId
    chunk_id: str
    version: int
    document_id: str
    ordinal: int
    title: str
    text: str
    language: str
    search_text: str
    cfg: str
    title_index: str
    text_index: str
    embedding: str | None
    metadata: Jsonb


class CurrentChunk(NamedTuple):
    """A document's current chunk as ingest compares it with a new cut (CURRENT_CHUNKS's columns)."""

    title: str
    ordinal: int
    pages: list[int] | None


# --- ingest: documents and chunk versions (retrieval/ingest.py) ---

INSERT_CHUNK = """
INSERT INTO kb_chunks (tenant_id, chunk_id, version, document_id, ordinal, title, text, language,
                       search_text, tsv, embedding, metadata)
VALUES (%(tenant)s, %(chunk_id)s, %(version)s, %(document_id)s, %(ordinal)s, %(title)s, %(text)s, %(language)s,
        %(search_text)s,
        setweight(to_tsvector(%(cfg)s::regconfig, %(title_index)s), 'A')
          || to_tsvector(%(cfg)s::regconfig, %(text_index)s),
        %(embedding)s::vector, %(metadata)s)
"""

# The time is a parameter: Citus refuses now() in `DO UPDATE SET` on a distributed table.
UPSERT_DOCUMENT = """
INSERT INTO kb_documents (tenant_id, document_id, title, source, content_sha, language, chunk_count, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (tenant_id, document_id) DO UPDATE
SET title = EXCLUDED.title, source = EXCLUDED.source, content_sha = EXCLUDED.content_sha,
    language = EXCLUDED.language, chunk_count = EXCLUDED.chunk_count, updated_at = EXCLUDED.updated_at,
    removed_at = NULL
"""

# Pages live in the chunk's metadata (absent for a document without pages), not a column of their own.
CURRENT_CHUNKS = """
SELECT chunk_id, title, ordinal, metadata->'pages' AS pages FROM kb_chunks
WHERE tenant_id = %s AND document_id = %s AND superseded_at IS NULL
"""
SUPERSEDE_CHUNKS = """
UPDATE kb_chunks SET superseded_at = now()
WHERE tenant_id = %s AND document_id = %s AND superseded_at IS NULL AND chunk_id = ANY(%s)
"""
NEXT_VERSION = "SELECT coalesce(max(version), 0) + 1 AS v FROM kb_chunks WHERE tenant_id = %s AND document_id = %s"
REMOVE_DOCUMENTS = """
UPDATE kb_documents SET removed_at = now(), chunk_count = 0, updated_at = now()
WHERE tenant_id = %s AND source = ANY(%s) AND NOT document_id = ANY(%s) AND removed_at IS NULL
RETURNING document_id
"""
MOVE_CHUNK = "UPDATE kb_chunks SET ordinal = %s WHERE tenant_id = %s AND chunk_id = %s AND superseded_at IS NULL"
SUPERSEDE_DOCUMENTS = (
    "UPDATE kb_chunks SET superseded_at = now()"
    " WHERE tenant_id = %s AND document_id = ANY(%s) AND superseded_at IS NULL"
)
KNOWN_DOCUMENTS = "SELECT document_id, content_sha FROM kb_documents WHERE tenant_id = %s AND removed_at IS NULL"
DELETE_TERMS = "DELETE FROM kb_terms WHERE tenant_id = %s"
INSERT_TERMS = "INSERT INTO kb_terms (tenant_id, term, ndoc) SELECT %s, word, ndoc FROM ts_stat(%s)"
TERM_SOURCE = "SELECT tsv FROM kb_chunks WHERE tenant_id = {} AND superseded_at IS NULL"


async def known_documents(conn: Conn, tenant_id: TenantId) -> dict[str, str]:
    """Return the tenant's present documents: document id -> content sha256."""
    cur = await conn.execute(KNOWN_DOCUMENTS, (tenant_id,))
    return {row["document_id"]: row["content_sha"] for row in await cur.fetchall()}


async def upsert_document(conn: Conn, params: tuple[Any, ...]) -> None:
    """Insert or update a document's row (and mark it present); `params` in UPSERT_DOCUMENT's order."""
    await conn.execute(UPSERT_DOCUMENT, params)


# A chunk's pages are JSON in its metadata: validated as they are read.
_PAGES: TypeAdapter[list[int] | None] = TypeAdapter(list[int] | None)


async def current_chunks(conn: Conn, tenant_id: TenantId, document_id: str) -> dict[str, CurrentChunk]:
    """Return the document's current chunks by chunk id."""
    cur = await conn.execute(CURRENT_CHUNKS, (tenant_id, document_id))
    rows = await cur.fetchall()
    return {
        row["chunk_id"]: CurrentChunk(row["title"], row["ordinal"], _PAGES.validate_python(row["pages"]))
        for row in rows
    }


async def supersede_chunks(conn: Conn, tenant_id: TenantId, document_id: str, chunk_ids: list[str]) -> None:
    """Mark the document's current chunks among `chunk_ids` superseded."""
    await conn.execute(SUPERSEDE_CHUNKS, (tenant_id, document_id, chunk_ids))


async def move_chunks(conn: Conn, moved: list[tuple[int, TenantId, str]]) -> None:
    """Set current chunks' ordinals: (ordinal, tenant id, chunk id) each."""
    async with conn.cursor() as cur:
        await cur.executemany(MOVE_CHUNK, moved)


async def next_version(conn: Conn, tenant_id: TenantId, document_id: str) -> int:
    """Return the version the document's next chunks get (one above its highest, 1 for a new one)."""
    row = await (await conn.execute(NEXT_VERSION, (tenant_id, document_id))).fetchone()
    return int(row["v"]) if row else 1


async def insert_chunks(conn: Conn, rows: list[ChunkInsert]) -> None:
    """Insert chunk rows (INSERT_CHUNK's parameters each)."""
    async with conn.cursor() as cur:
        await cur.executemany(INSERT_CHUNK, rows)


async def remove_documents(conn: Conn, tenant_id: TenantId, folders: Sequence[str], present: list[str]) -> list[str]:
    """Mark the folders' documents not in `present` removed; return their ids."""
    cur = await conn.execute(REMOVE_DOCUMENTS, (tenant_id, list(folders), present))
    return [row["document_id"] for row in await cur.fetchall()]


async def supersede_documents(conn: Conn, tenant_id: TenantId, document_ids: list[str]) -> None:
    """Mark every current chunk of the documents superseded."""
    await conn.execute(SUPERSEDE_DOCUMENTS, (tenant_id, document_ids))


async def refresh_vocabulary(conn: Conn, tenant_id: TenantId) -> None:
    """Rebuild the tenant's lexeme table (term, chunk frequency) from its chunks."""
    stat_query = sql.SQL(TERM_SOURCE).format(sql.Literal(tenant_id))
    async with conn.transaction():
        await hold_vocabulary(conn, tenant_id)
        await conn.execute(DELETE_TERMS, (tenant_id,))
        await conn.execute(INSERT_TERMS, (tenant_id, stat_query.as_string(conn)))


# --- search: one statement per query (retrieval/search.py) ---

SEARCH_SQL = """
WITH qword AS (
    -- One row per word of the question, with the forms it is searched by (query_words).
    SELECT g.ord, g.forms
    FROM unnest(%(q)s::text[]) WITH ORDINALITY AS g(forms, ord)
    ORDER BY g.ord
    LIMIT %(max_terms)s
), qlex AS (
    -- A lexeme two words share belongs to the first of them.
    SELECT DISTINCT ON (lex) w.ord, lex
    FROM qword w, unnest(tsvector_to_array(to_tsvector(%(cfg)s::regconfig, w.forms))) AS lex
    ORDER BY lex, w.ord
), total AS (
    SELECT greatest(coalesce(sum(chunk_count), 0), 1)::float8 AS n
    FROM kb_documents WHERE tenant_id = %(tenant)s
), exact AS (
    SELECT q.ord, q.lex, t.term, t.ndoc, 1.0::float8 AS sim
    FROM qlex q JOIN kb_terms t ON t.tenant_id = %(tenant)s AND t.term = q.lex
), fuzzy AS (
    -- Only words the tenant's documents lack are respelt: a typo, or another spelling.
    SELECT q.ord, q.lex, v.term, v.ndoc, v.sim
    FROM qlex q
    CROSS JOIN LATERAL (
        SELECT t.term, t.ndoc, similarity(t.term, q.lex)::float8 AS sim
        FROM kb_terms t
        WHERE t.tenant_id = %(tenant)s AND t.term %% q.lex
        ORDER BY sim DESC, t.term
        LIMIT 2
    ) v
    WHERE v.sim >= %(fuzzy)s AND NOT EXISTS (SELECT 1 FROM exact e WHERE e.lex = q.lex)
), weighted AS (
    -- A word weighs as its heaviest form the tenant has; a chunk holding any form holds it.
    SELECT m.ord, max(m.sim * ln(1 + (total.n - m.ndoc + 0.5) / (m.ndoc + 0.5))) AS w,
           bool_and(m.ndoc * 2 > total.n) AS common,
           string_agg(quote_literal(m.term), ' | ')::tsquery AS tq
    FROM (SELECT * FROM exact UNION ALL SELECT * FROM fuzzy) m, total
    GROUP BY m.ord
), groups AS MATERIALIZED (
    -- Words in over half of the tenant's chunks ("insurance") are dropped when the query
    -- has better ones: they barely move the ranking and each costs an index lookup
    -- returning most of the tenant.
    SELECT ord, w, tq FROM weighted
    WHERE NOT common OR NOT EXISTS (SELECT 1 FROM weighted WHERE NOT common)
), mass AS (
    -- Words the tenant has never seen weigh as much as the rarest: "weather insurance"
    -- is mostly about something the knowledge base does not cover.
    SELECT coalesce((SELECT sum(w) FROM groups), 0)
           + (SELECT count(DISTINCT ord) FROM qlex WHERE ord NOT IN (SELECT ord FROM weighted))
             * ln(1 + (total.n + 0.5) / 0.5) AS m
    FROM total
), essential AS (
    -- MaxScore pruning: a chunk holding only the lightest words (together under the
    -- threshold even in its document's title) cannot qualify, so those words are not looked
    -- up in the index; they still count through ts_rank_cd in the re-ranking below.
    SELECT g.ord, g.w, g.tq
    FROM (SELECT *, sum(w) OVER (ORDER BY w, ord ROWS UNBOUNDED PRECEDING) AS upto FROM groups) g, mass
    WHERE %(title_weight)s * g.upto >= %(min_coverage)s * mass.m
), light AS (
    SELECT coalesce((SELECT sum(w) FROM groups), 0) - coalesce((SELECT sum(w) FROM essential), 0) AS m
), query AS (
    SELECT string_agg('(' || tq::text || ')', ' | ')::tsquery AS tq FROM groups
), hits AS MATERIALIZED (
    -- One GIN lookup per essential word; of the chunks whose words could reach the threshold
    -- (in their document's title, with every light word), those holding the most weight
    -- are the candidates, scored exactly below.
    SELECT c.chunk_id, sum(g.w) AS held
    FROM essential g
    JOIN kb_chunks c ON c.tenant_id = %(tenant)s AND c.tsv @@ g.tq AND c.superseded_at IS NULL
    CROSS JOIN mass
    CROSS JOIN light
    GROUP BY c.chunk_id, mass.m, light.m
    HAVING %(title_weight)s * (sum(g.w) + light.m) >= %(min_coverage)s * mass.m
    ORDER BY held DESC, c.chunk_id
    LIMIT %(rerank)s
), titled AS MATERIALIZED (
    -- Each candidate's words and its document's title (the heading path's first part).
    SELECT h.chunk_id, c.tsv,
           to_tsvector(%(cfg)s::regconfig, split_part(split_part(c.search_text, E'\\n', 1), ' › ', 1)) AS title
    FROM hits h
    JOIN kb_chunks c ON c.tenant_id = %(tenant)s AND c.chunk_id = h.chunk_id AND c.superseded_at IS NULL
), scored AS MATERIALIZED (
    -- Each candidate's exact coverage: the weight of the query words it holds, a word of its
    -- document's title ("Life insurance") counting `title_weight` times, since the document
    -- is about it.
    SELECT t.chunk_id, sum(g.w * CASE WHEN t.title @@ g.tq THEN %(title_weight)s ELSE 1 END) / mass.m AS coverage
    FROM titled t
    JOIN groups g ON t.tsv @@ g.tq
    CROSS JOIN mass
    GROUP BY t.chunk_id, mass.m
    HAVING sum(g.w * CASE WHEN t.title @@ g.tq THEN %(title_weight)s ELSE 1 END) >= %(min_coverage)s * mass.m
), top AS MATERIALIZED (
    SELECT h.chunk_id, h.coverage, ts_rank_cd('{0.1, 0.2, 0.4, 1.0}', c.tsv, query.tq, 1) AS cd,
           -- the chunk's heading path (first line of search_text) found in the question
           word_similarity(split_part(c.search_text, E'\\n', 1), %(qs)s) AS tri
    FROM scored h
    JOIN kb_chunks c ON c.tenant_id = %(tenant)s AND c.chunk_id = h.chunk_id AND c.superseded_at IS NULL
    CROSS JOIN query
    ORDER BY h.coverage DESC, cd DESC, h.chunk_id
    LIMIT %(rerank)s
), ranked AS (
    SELECT chunk_id,
           row_number() OVER (ORDER BY coverage DESC, cd DESC, chunk_id) AS r_lex,
           row_number() OVER (ORDER BY cd DESC, chunk_id) AS r_cd,
           row_number() OVER (ORDER BY tri DESC, chunk_id) AS r_tri
    FROM top
), vec AS (
    SELECT chunk_id, row_number() OVER (ORDER BY dist, chunk_id) AS r_vec
    FROM (
        SELECT chunk_id, embedding <=> %(qvec)s::vector AS dist
        FROM kb_chunks
        WHERE tenant_id = %(tenant)s AND superseded_at IS NULL AND %(qvec)s::vector IS NOT NULL
          AND embedding IS NOT NULL AND vector_dims(embedding) = %(dim)s
        ORDER BY dist
        LIMIT %(vector_candidates)s
    ) nearest
    WHERE 1 - dist >= %(min_vsim)s
), fused AS (
    SELECT coalesce(r.chunk_id, v.chunk_id) AS chunk_id,
           coalesce(1.0 / (%(rrf_k)s + r.r_lex), 0)
           + 0.5 * coalesce(1.0 / (%(rrf_k)s + r.r_cd), 0)
           + 0.5 * coalesce(1.0 / (%(rrf_k)s + r.r_tri), 0)
           + coalesce(1.0 / (%(rrf_k)s + v.r_vec), 0) AS score
    FROM ranked r
    FULL JOIN vec v USING (chunk_id)
    ORDER BY score DESC, chunk_id
    LIMIT %(k)s
)
SELECT c.chunk_id, c.version, c.document_id, c.title, c.text, c.language, f.score::float8 AS score,
       c.metadata->'pages' AS pages
FROM fused f
JOIN kb_chunks c ON c.tenant_id = %(tenant)s AND c.chunk_id = f.chunk_id AND c.superseded_at IS NULL
ORDER BY f.score DESC, c.chunk_id
"""


async def search_rows(conn: Conn, params: Params) -> list[QuotedChunk]:
    """Return the chunks SEARCH_SQL ranks for `params` (search.py builds them), best first.

    Sent as a pipeline of one: a connection's first run of a statement prepares it, and
    outside a pipeline psycopg waits for that before it executes (a round trip more).
    """
    async with conn.pipeline():
        cur = await conn.execute(SEARCH_SQL, params)
    return [QuotedChunk.model_validate(row) for row in await cur.fetchall()]


# --- chunk versions: read back and pruned (retrieval/versions.py) ---

READ_CHUNK_VERSIONS = """
select c.chunk_id, c.version, c.document_id, c.title, c.text, c.metadata->'pages' as pages
from kb_chunks c
join unnest(%s::text[], %s::int[]) as wanted(chunk_id, version)
  on c.chunk_id = wanted.chunk_id and c.version = wanted.version
where c.tenant_id = %s
"""

ANY_PRUNABLE = "select 1 from kb_chunks where superseded_at is not null and superseded_at < now() - %s limit 1"

# One pass over the root checkpoints collects every cited pair, in the delete's own statement.
PRUNE_CHUNKS = f"""
with cited as materialized ({CITED_CHUNK_VERSIONS})
delete from kb_chunks c
where c.superseded_at is not null and c.superseded_at < now() - %s
  and not exists (
    select 1 from cited
    where cited.tenant_id = c.tenant_id and cited.chunk_id = c.chunk_id and cited.version = c.version
  )
"""

DROP_EMPTY_DOCUMENTS = """
delete from kb_documents d
where d.removed_at is not null
  and not exists (select 1 from kb_chunks c where c.tenant_id = d.tenant_id and c.document_id = d.document_id)
"""


async def chunk_versions(conn: Conn, tenant_id: TenantId, refs: Sequence[tuple[str, int]]) -> list[QuotedChunk]:
    """Return the tenant's chunk versions for (chunk id, version) pairs, current or superseded.

    A version's row has no language: it reads as unknown (empty).
    """
    cur = await conn.execute(READ_CHUNK_VERSIONS, ([r[0] for r in refs], [int(r[1]) for r in refs], tenant_id))
    return [QuotedChunk.model_validate(row) for row in await cur.fetchall()]


async def any_prunable(conn: Conn, grace: timedelta) -> bool:
    """Tell whether any chunk version was superseded more than `grace` ago."""
    return await (await conn.execute(ANY_PRUNABLE, (grace,))).fetchone() is not None


async def prune_chunks(conn: Conn, grace: timedelta) -> int:
    """Delete versions superseded more than `grace` ago that no run record cites; return how many went."""
    return (await conn.execute(PRUNE_CHUNKS, (grace,))).rowcount


async def drop_empty_documents(conn: Conn) -> None:
    """Delete removed documents left without any chunk version."""
    await conn.execute(DROP_EMPTY_DOCUMENTS)
