"""A document or a question with one huge word: ingest takes it, search answers, and finds it.

Postgres refuses a word over 2,046 bytes in a tsvector or tsquery literal; knowledge builds
its tsvectors with `to_tsvector` (which leaves such a word out) and its vocabulary from them,
so neither an ingest nor a search ever meets that refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chatbot.db.pool import Pool
from chatbot.retrieval.search import search_knowledge
from tests.retrieval.test_search import caller, ingest_docs, new_tenant

WORDS = {"persian-laughter": "خ" * 1030, "ascii-2050": "a" * 2050, "eight-thousand": "b" * 8000}


@pytest.mark.parametrize("shape", sorted(WORDS))
async def test_a_huge_word_in_a_document_or_a_question_breaks_nothing(pool: Pool, tmp_path: Path, shape: str) -> None:
    word, tenant = WORDS[shape], new_tenant()
    docs = {"odd.md": f"# Zebra cover\n\nThe zebra warranty covers {word} and lost stripes."}
    await ingest_docs(pool, tmp_path, tenant, docs)
    found = await search_knowledge(pool, caller(tenant, "en-US"), "zebra warranty")
    assert [c for c in found if "zebra warranty" in c.text]
    # The word itself, alone or in a question: answered, and found (the chunker cut it into
    # pieces Postgres indexes; the search leaves out what it cannot store).
    for question in (word, f"{word} zebra warranty"):
        found = await search_knowledge(pool, caller(tenant, "en-US"), question)
        assert [c for c in found if word[:50] in c.text]
