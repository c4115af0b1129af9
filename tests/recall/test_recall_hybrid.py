"""Recall with CHATBOT_EMBEDDINGS set: the nearest turns by embedding join the lexical ones (hybrid).

The embeddings model is a deterministic stand-in for a real one (no model is reached):
words of one meaning share a dimension ("sofa" and "couch"), so a question finds a turn
it shares no word with, which lexical search alone cannot. It is installed where the
service loads its model from the setting (`chatbot.services.load_embeddings`), so the
setting, the index writes, the search and the run record are the service's own.
"""

from __future__ import annotations

import hashlib
import math
import re

import psycopg
import pytest
from langchain_core.embeddings import Embeddings

import chatbot.services
from tests.fixtures.app import running_app
from tests.recall.conversation import ask, long_thread

SMALL = 1000  # a window of a few turns: 30 turns are a long thread
SPEC = "stand-in:meanings"
DETAIL = "The sofa the water ruined was dark green velvet."
QUESTION = "What colour was the couch?"  # no word of the detail's
MEANINGS = {"sofa": 0, "couch": 0, "settee": 0, "green": 1, "colour": 1, "color": 1}
_WORD = re.compile(r"\w+")


class MeaningEmbeddings(Embeddings):
    """Words of one meaning on one dimension, other words hashed onto the rest: unit vectors."""

    dim = 64

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in _WORD.findall(text.casefold()):
            if word in MEANINGS:
                vector[MEANINGS[word]] += 1.0
            else:
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                vector[2 + int.from_bytes(digest, "big") % (self.dim - 2)] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Return one vector per text."""
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """Return the vector of a query."""
        return self._embed(text)


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
