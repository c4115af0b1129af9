"""One hostile word never breaks its thread: every term recall stores or searches with is bounded.

Postgres refuses a word over 2,046 bytes in a tsvector or a tsquery ("word is too long"). A
turn holding one used to fail every later run of its thread once the thread needed recall
(503s for good). Each shape below is sent on a thread long enough to need recall; the runs
after it answer, the word is stored cut to what Postgres can hold, and a search with
the word itself finds its turn.
"""

from __future__ import annotations

import psycopg
import pytest

from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.recall.service import IndexWriter, RecallQuery, ThreadRecall
from chatbot.recall.terms import MAX_TERM_BYTES, bounded, query_weights, terms
from chatbot.threads.schemas import MAX_CONTENT_CHARS
from tests.fixtures.app import running_app, services_of
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.messages import send_for_answer
from tests.recall.conversation import ask, long_thread
from tests.recall.test_recall_scope import SMALL

COVERED = "What does travel insurance cover for medical costs abroad?"  # the demo knowledge answers it
SHAPES = {
    "persian-laughter": "خ" * 1030,
    "ascii-2050": "a" * 2050,
    "one-8000-letter-word": "b" * 7990,  # with the code below, at the message's 8,000-character bound
    "just-under-the-limit": "z" * (MAX_TERM_BYTES - 1),
}


def _stored_terms(url: str, thread: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("select term from thread_terms where thread_id = %s", (thread,)).fetchall()
    return {str(r[0]) for r in rows}


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_a_turn_with_one_huge_word_leaves_its_thread_answering(isolated_database_url: str, shape: str) -> None:
    url, word = isolated_database_url, SHAPES[shape]
    await load_demo_kb(url)
    thread = f"long-word-{shape}"
    async with running_app(url, context_tokens=SMALL) as client:
        await long_thread(client, thread, "en", 30, {3: f"PX4471 {word}"})
        # Later runs: the thread needs recall now, and every one of them answers.
        record = await ask(client, thread, f"What was code PX4471? {COVERED}", "en")
        assert record["status"] == "answered"
        assert (await send_for_answer(client, thread, COVERED))["status"] == "answered"
        # The word in a question: searched with, cut the same way; the offline model asks what it means.
        asking = await send_for_answer(client, thread, f"{word[: MAX_CONTENT_CHARS - len(COVERED) - 1]} {COVERED}")
        assert asking["status"] in {"answered", "clarifying"}
        assert (await send_for_answer(client, thread, COVERED))["status"] == "answered"
        # Found by the word alone (too long for the window's recall share, so searched directly).
        found = await ThreadRecall(services_of(client).pool).find(
            RecallQuery(
                ThreadId(thread),
                IndexWriter(TenantId("acme"), UserId("u1"), None),
                [],
                whole=False,
                window_first=None,
                terms=query_weights(word, [], context_weight=0.3, limit=32),
                question=word,
                hits=4,
            )
        )
        assert [h for h in found if h.turn.content == f"PX4471 {word}"]
    (stored,) = {bounded(t) for t in terms(word)}
    assert len(stored.encode()) <= MAX_TERM_BYTES and word.startswith(stored)
    assert stored in _stored_terms(url, thread)
