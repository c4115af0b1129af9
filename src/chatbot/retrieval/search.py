"""Tenant-scoped hybrid search over the knowledge base: one SQL statement per query.

Ranking, all inside Postgres:
1. The query's lexemes (English: `english` config, stemmed; Persian: `simple` over
   normalised text, stop words removed) are looked up in the tenant's vocabulary
   (`kb_terms`). A lexeme the tenant has is used as is; one it lacks (a typo, another
   spelling) is replaced by the tenant's words within trigram similarity
   `FUZZY_SIMILARITY` of it. Each word is weighted by its inverse chunk frequency, so
   "insurance", present everywhere, counts for little and "cancellation" for much.
2. A chunk's `coverage` is the weight of the query words it holds over the query's
   total weight (words the tenant has never seen count as the rarest). Only words that
   can lift a chunk over `MIN_COVERAGE` are looked up in the GIN index (MaxScore).
3. The best `LEXICAL_CANDIDATES` by coverage are re-ranked three ways: coverage,
   `ts_rank_cd` (title hits, proximity) and trigram `word_similarity` of the chunk's
   heading path against the question.
4. With an embeddings model, the nearest chunks by cosine distance form a fourth list.
5. The lists are fused by weighted reciprocal rank (k = 60); `score` is the fused value.

Only current chunk versions are searched (`superseded_at IS NULL`, which every index on
the search path is partial on); superseded ones stay for run records (ingest.py).

"Nothing relevant" is an empty list: a lexical hit counts only when its coverage
reaches `MIN_COVERAGE`, and a vector hit only above `MIN_VECTOR_SIMILARITY`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.embeddings import Embeddings
from psycopg_pool import AsyncConnectionPool

from chatbot.caller import CallerContext
from chatbot.retrieval.normalize import detect_language, query_form, search_form, ts_config

FUZZY_SIMILARITY = 0.4
MIN_COVERAGE = 0.3
MIN_VECTOR_SIMILARITY = 0.5
RRF_K = 60
# Longer inputs are pasted text, not questions: their tail adds cost and noise, not recall.
MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32
VECTOR_CANDIDATES = 50
# Lexical hits re-ranked (ts_rank_cd, heading trigrams) and fused; the rest only by coverage.
RERANK = 50
LEXICAL_CANDIDATES = 150


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    """One knowledge chunk found for a query, with its fused relevance score."""

    chunk_id: str
    document_id: str
    title: str
    text: str
    language: str
    score: float
    version: int = 1
    """The chunk's version: (chunk_id, version) names the exact row a run record cites."""

    def to_state(self) -> dict[str, Any]:
        """Return the chunk as a plain dict for graph state (serialisable by the checkpointer)."""
        return asdict(self)


_SEARCH_SQL = """
WITH qlex AS (
    SELECT DISTINCT lex
    FROM unnest(tsvector_to_array(to_tsvector(%(cfg)s::regconfig, %(q)s))) AS lex
    LIMIT %(max_terms)s
), total AS (
    SELECT greatest(coalesce(sum(chunk_count), 0), 1)::float8 AS n
    FROM kb_documents WHERE tenant_id = %(tenant)s
), exact AS (
    SELECT q.lex, t.term, t.ndoc, 1.0::float8 AS sim
    FROM qlex q JOIN kb_terms t ON t.tenant_id = %(tenant)s AND t.term = q.lex
), fuzzy AS (
    -- Only words the tenant's documents lack are respelt: a typo, or another spelling.
    SELECT q.lex, v.term, v.ndoc, v.sim
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
    SELECT m.lex, max(m.sim * ln(1 + (total.n - m.ndoc + 0.5) / (m.ndoc + 0.5))) AS w,
           bool_and(m.ndoc * 2 > total.n) AS common,
           string_agg(quote_literal(m.term), ' | ')::tsquery AS tq
    FROM (SELECT * FROM exact UNION ALL SELECT * FROM fuzzy) m, total
    GROUP BY m.lex
), groups AS MATERIALIZED (
    -- Words in over half of the tenant's chunks ("insurance") are dropped when the query
    -- has better ones: they barely move the ranking and each costs an index lookup
    -- returning most of the tenant.
    SELECT lex, w, tq FROM weighted
    WHERE NOT common OR NOT EXISTS (SELECT 1 FROM weighted WHERE NOT common)
), mass AS (
    -- Words the tenant has never seen weigh as much as the rarest: "weather insurance"
    -- is mostly about something the knowledge base does not cover.
    SELECT coalesce((SELECT sum(w) FROM groups), 0)
           + (SELECT count(*) FROM qlex WHERE lex NOT IN (SELECT lex FROM weighted))
             * ln(1 + (total.n + 0.5) / 0.5) AS m
    FROM total
), essential AS (
    -- MaxScore pruning: a chunk holding only the lightest words (together under the
    -- threshold) cannot qualify, so those words are not looked up in the index; they
    -- still count through ts_rank_cd in the re-ranking below.
    SELECT g.lex, g.w, g.tq
    FROM (SELECT *, sum(w) OVER (ORDER BY w, lex ROWS UNBOUNDED PRECEDING) AS upto FROM groups) g, mass
    WHERE g.upto >= %(min_coverage)s * mass.m
), light AS (
    SELECT coalesce((SELECT sum(w) FROM groups), 0) - coalesce((SELECT sum(w) FROM essential), 0) AS m
), query AS (
    SELECT string_agg('(' || tq::text || ')', ' | ')::tsquery AS tq FROM groups
), hits AS MATERIALIZED (
    -- One GIN lookup per query word; a chunk's coverage is the weight of the words it has.
    SELECT c.chunk_id, sum(g.w) / mass.m AS coverage
    FROM essential g
    JOIN kb_chunks c ON c.tenant_id = %(tenant)s AND c.tsv @@ g.tq AND c.superseded_at IS NULL
    CROSS JOIN mass
    CROSS JOIN light
    GROUP BY c.chunk_id, mass.m, light.m
    -- an upper bound: the light words the chunk may also hold are not checked
    HAVING sum(g.w) + light.m >= %(min_coverage)s * mass.m
    ORDER BY coverage DESC, c.chunk_id
    LIMIT %(candidates)s
), top AS MATERIALIZED (
    SELECT h.chunk_id, h.coverage, ts_rank_cd('{0.1, 0.2, 0.4, 1.0}', c.tsv, query.tq, 1) AS cd,
           -- the chunk's heading path (first line of search_text) found in the question
           word_similarity(split_part(c.search_text, E'\\n', 1), %(qs)s) AS tri
    FROM hits h
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
SELECT c.chunk_id, c.version, c.document_id, c.title, c.text, c.language, f.score::float8 AS score
FROM fused f
JOIN kb_chunks c ON c.tenant_id = %(tenant)s AND c.chunk_id = f.chunk_id AND c.superseded_at IS NULL
ORDER BY f.score DESC, c.chunk_id
"""


def _vector_literal(values: list[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


async def search_knowledge(
    pool: AsyncConnectionPool[Any],
    caller: CallerContext,
    query: str,
    *,
    k: int = 5,
    embeddings: Embeddings | None = None,
) -> list[RetrievedChunk]:
    """Return the caller's tenant's `k` most relevant chunks for `query`, best first.

    The tenant comes from `caller` only. An empty list means nothing relevant was found.
    """
    if not caller.tenant_id:
        raise ValueError("search needs the caller's tenant")
    query = query[:MAX_QUERY_CHARS]
    terms = query_form(query)
    if k <= 0 or not terms:
        return []
    qvec: str | None = None
    dim = 0
    if embeddings is not None:
        vector = await embeddings.aembed_query(query)
        qvec, dim = _vector_literal(vector), len(vector)
    params = {
        "tenant": caller.tenant_id,
        "cfg": ts_config(detect_language(query)),
        "q": terms,
        "qs": search_form(query),
        "max_terms": MAX_QUERY_TERMS,
        "fuzzy": FUZZY_SIMILARITY,
        "min_coverage": MIN_COVERAGE,
        "qvec": qvec,
        "dim": dim,
        "vector_candidates": VECTOR_CANDIDATES,
        "rerank": RERANK,
        "candidates": LEXICAL_CANDIDATES,
        "min_vsim": MIN_VECTOR_SIMILARITY,
        "rrf_k": RRF_K,
        "k": k,
    }
    async with pool.connection() as conn:
        cur = await conn.execute(_SEARCH_SQL, params)
        rows = await cur.fetchall()
    return [
        RetrievedChunk(
            chunk_id=row["chunk_id"],
            document_id=row["document_id"],
            title=row["title"],
            text=row["text"],
            language=row["language"],
            score=float(row["score"]),
            version=int(row["version"]),
        )
        for row in rows
    ]
