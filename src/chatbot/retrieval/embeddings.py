"""The optional embeddings model behind vector search."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings


def load_embeddings(spec: str | None) -> Embeddings | None:
    """Return the embeddings model named `provider:model` (CHATBOT_EMBEDDINGS), or None.

    Without a spec, search is lexical only (full text + trigram). The provider package
    must be installed (an optional extra) and the model reachable: nothing is downloaded
    here, and a misnamed provider fails at start-up rather than on the first question.
    """
    if not spec or not spec.strip():
        return None
    # Imported lazily: `langchain.embeddings` pulls in provider discovery the default
    # (lexical) configuration never needs.
    from langchain.embeddings import init_embeddings

    return init_embeddings(spec.strip())
