"""Token usage of one model call, read from what the provider reported."""

from __future__ import annotations

from typing import Literal

from chatbot.db.usage_totals import token_count
from chatbot.responses import ModelCallUsage

UsageKind = Literal["answer", "summary", "memory"]


def usage_from_metadata(kind: UsageKind, model: str, metadata: object) -> ModelCallUsage:
    """Return the usage LangChain's `usage_metadata` carries (None or partial: zeros).

    Counts are clamped by `token_count` to [0, CALL_TOKENS_MAX] (db/usage_totals.py).
    """
    if not isinstance(metadata, dict):
        return ModelCallUsage(kind=kind, model=model)
    details = metadata.get("input_token_details")
    cached = details.get("cache_read") if isinstance(details, dict) else None
    return ModelCallUsage(
        kind=kind,
        model=model,
        input_tokens=token_count(metadata.get("input_tokens")),
        output_tokens=token_count(metadata.get("output_tokens")),
        cached_input_tokens=token_count(cached),
    )
