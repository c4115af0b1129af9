"""Measure retrieval quality on the demo knowledge base and search latency at scale.

Prints recall@5 and MRR of the labelled questions in bench/data/retrieval_eval.jsonl
against the demo tenant (the quality figure), then the p50/p95 latency of
`search_knowledge` with 10 tenants of 5,000 synthetic chunks each (plus the demo KB).
The synthetic chunks are shuffled bags of the demo documents' own words, so they share
every word with the real chunk they imitate: the recall printed with them is a stress
figure for a lexical ranker, not a quality one; their purpose is realistic posting-list
sizes for the latency figure.

Usage: python -m bench.retrieval [--tenants 10] [--chunks 5000] [--rounds 3]
Uses CHATBOT_DATABASE_URL (an already migrated database; the bench's tenants are named
`bench-*` and deleted afterwards) or starts an embedded Postgres under a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench._pg import bench_database
from chatbot.caller import CallerContext
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.normalize import index_form, search_form
from chatbot.retrieval.queries import refresh_vocabulary
from chatbot.retrieval.search import search_knowledge

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
EVAL = ROOT / "bench" / "data" / "retrieval_eval.jsonl"
DEMO_TENANT = TenantId("bench-acme")


def load_eval() -> list[dict[str, Any]]:
    """Return the labelled questions."""
    return [json.loads(line) for line in EVAL.read_text().splitlines() if line.strip()]


async def evaluate(
    pool: AsyncConnectionPool[Any], tenant: str, questions: list[dict[str, Any]], verbose: bool
) -> tuple[float, float, list[float]]:
    """Return recall@5, MRR and per-query latencies (ms) of the questions against one tenant."""
    hits, reciprocal, latencies = 0, 0.0, []
    misses: Counter[str] = Counter()
    for item in questions:
        caller = CallerContext(TenantId(tenant), UserId("bench-user"), "fa-IR")
        start = time.perf_counter()
        found = await search_knowledge(pool, caller, item["query"], k=5)
        latencies.append((time.perf_counter() - start) * 1000)
        docs = [c.document_id for c in found]
        if item["document_id"] in docs:
            hits += 1
            reciprocal += 1 / (docs.index(item["document_id"]) + 1)
        else:
            misses.update(item.get("tags") or ["plain"])
            if verbose:
                print(f"  miss: {item['query']!r} -> {docs[:3]}")
    if misses:
        print(f"  misses by tag: {dict(misses)}")
    return hits / len(questions), reciprocal / len(questions), latencies


def _pseudo_word(rng: random.Random, alphabet: str) -> str:
    return "".join(rng.choices(alphabet, k=rng.randint(4, 9)))


def synthetic_rows(
    tenant: str, chunks: int, sources: list[tuple[str, list[str]]], rng: random.Random
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Return (documents, chunks) rows of topic-coherent distractor text.

    Each synthetic document takes one demo document as its topic and draws most words
    from it (so distractors compete with the real chunks on the same words), plus names
    of its own (a real tenant's 5,000 chunks have a long tail of words seen once).
    """
    docs, rows = [], []
    for d in range(chunks // 10):
        language, words = sources[d % len(sources)]
        alphabet = "ابپتثجحخدذرزسشصطظعغفقکگلمنوهی" if language == "fa" else "abcdefghijklmnopqrstuvwxyz"
        names = [_pseudo_word(rng, alphabet) for _ in range(40)]
        doc_id = f"synthetic/doc-{d:04d}.md"
        docs.append((tenant, doc_id, f"Synthetic {d}", "synthetic", f"sha{d}", language, 10))
        for i in range(10):
            n = rng.randint(40, 120)
            body = rng.choices(words, k=n) + rng.choices(names, k=n // 4)
            rng.shuffle(body)
            text = " ".join(body)
            title = " ".join(rng.choices(words, k=3) + rng.choices(names, k=1))
            rows.append(
                (
                    tenant,
                    f"{doc_id}#{i}",
                    doc_id,
                    i,
                    title,
                    text,
                    language,
                    search_form(f"{title}\n{text}"),
                    index_form(title),
                    index_form(text),
                )
            )
    return docs, rows


async def load_synthetic(pool: AsyncConnectionPool[Any], tenants: list[TenantId], chunks: int) -> None:
    """Bulk-load distractor chunks with COPY, bypassing the ingest path."""
    sources = [
        ("fa" if path.parent.name == "fa" else "en", path.read_text().split()) for path in sorted(KB.rglob("*.md"))
    ]
    rng = random.Random(7)
    async with pool.connection() as conn:
        await conn.execute("""CREATE TEMP TABLE staging (tenant_id text, chunk_id text, document_id text,
            ordinal int, title text, text text, language text, search_text text, title_index text,
            text_index text)""")
        for tenant in tenants:
            docs, rows = synthetic_rows(tenant, chunks, sources, rng)
            async with conn.cursor() as cur:
                async with cur.copy(
                    "COPY kb_documents (tenant_id, document_id, title, source, content_sha, "
                    "language, chunk_count) FROM STDIN"
                ) as copy:
                    for doc in docs:
                        await copy.write_row(doc)
                async with cur.copy("COPY staging FROM STDIN") as copy:
                    for row in rows:
                        await copy.write_row(row)
            await conn.execute("""
                INSERT INTO kb_chunks (tenant_id, chunk_id, document_id, ordinal, title, text, language,
                                       search_text, tsv)
                SELECT tenant_id, chunk_id, document_id, ordinal, title, text, language, search_text,
                       setweight(to_tsvector(cfg, title_index), 'A') || to_tsvector(cfg, text_index)
                FROM staging,
                     LATERAL (SELECT (CASE language WHEN 'en' THEN 'english' ELSE 'simple' END)::regconfig
                              AS cfg) l""")
            await conn.execute("TRUNCATE staging")
            await refresh_vocabulary(conn, TenantId(tenant))
        await conn.execute("DROP TABLE staging")


async def cleanup(pool: AsyncConnectionPool[Any]) -> None:
    """Delete every bench tenant's rows."""
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM kb_documents WHERE tenant_id LIKE 'bench-%'")
        await conn.execute("DELETE FROM kb_terms WHERE tenant_id LIKE 'bench-%'")


async def main(args: argparse.Namespace) -> None:
    """Run the benchmark and print its figures."""
    questions = load_eval()
    async with bench_database("bench") as url:
        kwargs = {"autocommit": True, "row_factory": dict_row}
        async with AsyncConnectionPool(url, min_size=1, max_size=2, kwargs=kwargs, open=False) as pool:
            await cleanup(pool)
            try:
                await ingest_paths(pool, DEMO_TENANT, [KB])
                recall, mrr, _ = await evaluate(pool, DEMO_TENANT, questions, args.verbose)
                print(f"demo KB ({len(questions)} questions): recall@5 = {recall:.3f}  MRR = {mrr:.3f}")

                tenants = [TenantId(f"bench-t{i:02d}") for i in range(args.tenants)]
                start = time.perf_counter()
                await load_synthetic(pool, tenants, args.chunks)
                for tenant in tenants:
                    await ingest_paths(pool, tenant, [KB])
                async with pool.connection() as conn:
                    # A loaded knowledge base is read many times: measure it vacuumed (hint
                    # bits and visibility map set) and analysed, as it is after autovacuum.
                    for table in ("kb_documents", "kb_chunks", "kb_terms"):
                        await conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
                print(
                    f"loaded {args.tenants} tenants x {args.chunks} synthetic chunks "
                    f"(+ demo KB each) in {time.perf_counter() - start:.1f} s"
                )
                latencies: list[float] = []
                scaled: list[tuple[float, float]] = []
                for r in range(args.rounds):
                    tenant = tenants[r % len(tenants)]
                    recall, mrr, lat = await evaluate(pool, tenant, questions, args.verbose)
                    scaled.append((recall, mrr))
                    latencies.extend(lat)
                latencies.sort()
                print(
                    f"stress: with {args.chunks} look-alike chunks per tenant: recall@5 = {scaled[0][0]:.3f}  "
                    f"MRR = {scaled[0][1]:.3f}"
                )
                p95 = latencies[int(len(latencies) * 0.95) - 1]
                p50 = statistics.median(latencies)
                print(
                    f"search latency over {len(latencies)} queries: p50 = {p50:.2f} ms"
                    f"  p95 = {p95:.2f} ms  max = {latencies[-1]:.2f} ms"
                )
            finally:
                await cleanup(pool)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="print each missed question")
    asyncio.run(main(parser.parse_args()))
