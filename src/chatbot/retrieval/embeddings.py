"""Optional embeddings for vector search: `CHATBOT_EMBEDDINGS=provider:model`."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings


def load_embeddings(spec: str | None) -> Embeddings | None:
    """Return the configured embeddings model, or None when vector search is off."""
    if not spec:
        return None
    from langchain.embeddings import init_embeddings

    return init_embeddings(spec)
