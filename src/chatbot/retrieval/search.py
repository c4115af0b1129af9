"""Tenant-scoped hybrid search over the knowledge base: one SQL statement per query.

Ranking, all inside Postgres:
1. The query's words (`query_words`: each with its other forms, a ZWNJ compound's parts
   and a plural's stem, so a word counts once however many forms it has), as lexemes
   (English: `english` config, stemmed; Persian: `simple` over normalised text, stop
   words removed), are looked up in the tenant's vocabulary
   (`kb_terms`). A lexeme the tenant has is used as is; one it lacks (a typo, another
   spelling) is replaced by the tenant's words within trigram similarity
   `FUZZY_SIMILARITY` of it. Each word is weighted by its inverse chunk frequency, so
   "insurance", present everywhere, counts for little and "cancellation" for much.
2. A chunk's `coverage` is the weight of the query words it holds over the query's
   total weight (words the tenant has never seen count as the rarest), a word of the
   chunk's document title counting `TITLE_WEIGHT` times. Only words that can lift a chunk
   over `MIN_COVERAGE` are looked up in the GIN index (MaxScore).
3. The `RERANK` chunks holding the most of that weight are the candidates: their
   coverage is computed exactly (every query word, the title), those under
   `MIN_COVERAGE` dropped, and the rest re-ranked three ways: coverage, `ts_rank_cd`
   (title hits, proximity) and trigram `word_similarity` of the chunk's heading path
   against the question.
4. With an embeddings model, the nearest chunks by cosine distance form a fourth list.
5. The lists are fused by weighted reciprocal rank (k = 60); `score` is the fused value.

Only current chunk versions are searched (`superseded_at IS NULL`, which every index on
the search path is partial on); superseded ones stay for run records (ingest.py).

"Nothing relevant" is an empty list: a lexical hit counts only when its coverage
reaches `MIN_COVERAGE`, and a vector hit only above `MIN_VECTOR_SIMILARITY`.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.embeddings import Embeddings
from psycopg_pool import AsyncConnectionPool

from chatbot.caller import CallerContext
from chatbot.responses import QuotedChunk
from chatbot.retrieval import queries
from chatbot.retrieval.normalize import detect_language, query_words, search_form, ts_config

FUZZY_SIMILARITY = 0.4
MIN_COVERAGE = 0.3
# A query word in a chunk's document title ("Life insurance") counts this many times in its
# coverage: the document is about it, so "Which life insurance is right for my family?"
# reaches life insurance though the knowledge base never says "family".
TITLE_WEIGHT = 2.0
MIN_VECTOR_SIMILARITY = 0.5
RRF_K = 60
# Longer inputs are pasted text, not questions: their tail adds cost and noise, not recall.
MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32
VECTOR_CANDIDATES = 50
# Lexical candidates (those holding the most query weight) scored exactly, re-ranked
# (ts_rank_cd, heading trigrams) and fused.
RERANK = 50


# A question in a message: the text up to a question mark, Latin or Persian.
_QUESTION = re.compile(r"[^.!?؟\n]*[?؟]")


def searched_words(query: str) -> list[str]:
    """Return the words search weighs (`query_words`): a long message's questions, else all of it.

    A message of more words than `MAX_QUERY_TERMS` is mostly context: an accident told before
    the question it leads to, a letter pasted above it. Its first words would fill the terms
    search weighs, and the telling's names and dates, which no chunk holds, would outweigh
    what is asked; so when it asks something, its questions are what is searched.
    """
    words = query_words(query)
    if len(words) <= MAX_QUERY_TERMS:
        return words
    asked = list(dict.fromkeys(word for question in _QUESTION.findall(query) for word in query_words(question)))
    return asked or words


def _vector_literal(values: list[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


async def search_knowledge(
    pool: AsyncConnectionPool[Any],
    caller: CallerContext,
    query: str,
    *,
    k: int = 5,
    embeddings: Embeddings | None = None,
) -> list[QuotedChunk]:
    """Return the caller's tenant's `k` most relevant chunks for `query`, best first.

    The tenant comes from `caller` only. An empty list means nothing relevant was found.
    Each chunk is found with its title, language and fused relevance (`score`); the graph's
    retriever gives these (retriever.py) and the run keeps them to the record.
    """
    if not caller.tenant_id:
        raise ValueError("search needs the caller's tenant")
    query = query[:MAX_QUERY_CHARS]
    words = searched_words(query)
    if k <= 0 or not words:
        return []
    qvec: str | None = None
    dim = 0
    if embeddings is not None:
        vector = await embeddings.aembed_query(query)
        qvec, dim = _vector_literal(vector), len(vector)
    params = {
        "tenant": caller.tenant_id,
        "cfg": ts_config(detect_language(query)),
        "q": words,
        "qs": search_form(query),
        "max_terms": MAX_QUERY_TERMS,
        "fuzzy": FUZZY_SIMILARITY,
        "min_coverage": MIN_COVERAGE,
        "title_weight": TITLE_WEIGHT,
        "qvec": qvec,
        "dim": dim,
        "vector_candidates": VECTOR_CANDIDATES,
        "rerank": RERANK,
        "min_vsim": MIN_VECTOR_SIMILARITY,
        "rrf_k": RRF_K,
        "k": k,
    }
    async with pool.connection() as conn:
        return await queries.search_rows(conn, params)
