"""Token usage of one model call, as the provider reported it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

UsageKind = Literal["answer", "summary", "memory"]


@dataclass(frozen=True, slots=True)
class Usage:
    """One model call's token counts (0 where the provider reports none, e.g. the offline model)."""

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
            _count(metadata.get("input_tokens")),
            _count(metadata.get("output_tokens")),
            _count(cached),
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
