"""A retrieved chunk as the models' side reads it: the offline responder ranks and quotes these.

models/ imports no retrieval: the graph hands its retrieved chunks over in this shape.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class QuotedChunk(TypedDict):
    """One retrieved chunk, as the offline responder ranks and quotes it and the window shows it."""

    chunk_id: str
    title: str
    """The heading path, `Document › Heading` (empty when the chunk has none)."""
    text: str
    language: str
    """"fa" or "en" (empty when unknown): the responder prefers chunks in the answer's language."""
    pages: NotRequired[list[int] | None]
    """The 1-based PDF pages the text came from (absent or None for a document without pages)."""
