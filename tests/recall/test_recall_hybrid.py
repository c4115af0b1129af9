"""Recall with CHATBOT_EMBEDDINGS set: the nearest turns by embedding join the lexical ones (hybrid).

The embeddings model is a deterministic stand-in for a real one (no model is reached): the
retrieval tests' hashing model, with words of one meaning hashed as one ("sofa", "couch"),
so a question finds a turn it shares no word with, which lexical search alone cannot. It is installed where the
service loads its model from the setting (`chatbot.services.load_embeddings`), so the
setting, the index writes, the search and the run record are the service's own.
"""

from __future__ import annotations

import re

import psycopg
import pytest

import chatbot.services
from tests.fixtures.app import running_app
from tests.fixtures.retrieval_kb import HashingEmbeddings
from tests.recall.conversation import ask, long_thread

SMALL = 1000  # a window of a few turns: 30 turns are a long thread
SPEC = "stand-in:meanings"
DETAIL = "The sofa the water ruined was dark green velvet."
QUESTION = "What colour was the couch?"  # no word of the detail's
MEANINGS = {"sofa": "seat", "couch": "seat", "settee": "seat", "green": "colour", "color": "colour"}
_WORD = re.compile(r"\w+")


class MeaningEmbeddings(HashingEmbeddings):
    """The retrieval tests' hashing model, with words of one meaning hashed as one word."""

    def _embed(self, text: str) -> list[float]:
        return super()._embed(" ".join(MEANINGS.get(w, w) for w in _WORD.findall(text.casefold())))


@pytest.fixture
def meaning_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load the stand-in model for SPEC, as the service would load a provider's for its spec."""
    real = chatbot.services.load_embeddings
    monkeypatch.setattr(
        chatbot.services, "load_embeddings", lambda spec: MeaningEmbeddings() if spec == SPEC else real(spec)
    )


def _embedded(url: str, thread: str) -> tuple[int, int]:
    """Return how many of the thread's indexed turns there are, and how many have an embedding."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "select count(*), count(embedding) from thread_turns where thread_id = %s", (thread,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_with_embeddings_configured_recall_finds_a_turn_sharing_no_word_with_the_question(
    isolated_database_url: str, meaning_model: None
) -> None:
    url = isolated_database_url
    async with running_app(url, context_tokens=SMALL, embeddings=SPEC) as client:
        ids = await long_thread(client, "hybrid", "en", 30, {10: DETAIL})
        record = await ask(client, "hybrid", QUESTION, "en")
    assert {"id": ids[10], "role": "user", "content": DETAIL} in record["context"]["recalled"]
    assert ids[10] not in [m["id"] for m in record["context"]["messages"]]  # recalled, not in the window
    indexed, embedded = _embedded(url, "hybrid")
    assert indexed > 0 and embedded == indexed  # every indexed turn has its vector

    # The same thread without embeddings: lexical search alone does not find the turn.
    async with running_app(url, context_tokens=SMALL) as client:
        await long_thread(client, "lexical", "en", 30, {10: DETAIL})
        record = await ask(client, "lexical", QUESTION, "en")
    assert all(r["id"] != ids[10] and DETAIL != r["content"] for r in record["context"]["recalled"])
    assert _embedded(url, "lexical")[1] == 0
