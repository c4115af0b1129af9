"""Token usage of one model call, as the provider reported it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from chatbot.db.usage_totals import token_count

UsageKind = Literal["answer", "summary", "memory"]


@dataclass(frozen=True, slots=True)
class Usage:
    """One model call's token counts (0 where the provider reports none, e.g. the offline model).

    Counts from a provider come through `from_metadata` (or models/_wire.py), clamped by
    `token_count` to [0, CALL_TOKENS_MAX] (db/usage_totals.py).
    """

    kind: UsageKind
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Return the record's form of this entry."""
        return asdict(self)

    @classmethod
    def from_metadata(cls, kind: UsageKind, model: str, metadata: Any) -> Usage:
        """Return the usage LangChain's `usage_metadata` carries (None or partial: zeros)."""
        if not isinstance(metadata, dict):
            return cls(kind, model)
        details = metadata.get("input_token_details")
        cached = details.get("cache_read") if isinstance(details, dict) else None
        return cls(
            kind,
            model,
            token_count(metadata.get("input_tokens")),
            token_count(metadata.get("output_tokens")),
            token_count(cached),
        )
