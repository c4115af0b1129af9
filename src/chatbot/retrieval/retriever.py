"""The graph's retriever: the caller's tenant's knowledge chunks for a question, bounded in time."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from langchain_core.embeddings import Embeddings

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.responses import QuotedChunk
from chatbot.retrieval.search import search_knowledge


@dataclass(frozen=True)
class KnowledgeRetriever:
    """Search the knowledge base for the graph's `retrieve` node, as typed chunks."""

    pool: Pool
    timeout_seconds: float
    """Bounded like a model's first token: an embeddings provider can hang too."""
    embeddings: Embeddings | None = None
    k: int = 5
    """Chunks per question: what a model's prompt holds, or more for the offline responder."""

    async def __call__(self, caller: CallerContext, query: str) -> list[QuotedChunk]:
        """Return the caller's tenant's most relevant chunks for `query`, best first."""
        async with asyncio.timeout(self.timeout_seconds):
            return await search_knowledge(self.pool, caller, query, k=self.k, embeddings=self.embeddings)
