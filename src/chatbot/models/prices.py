"""`CHATBOT_MODEL_PRICES`: USD per million tokens per `provider:model`, to turn usage into cost."""

from __future__ import annotations

import json
from dataclasses import dataclass


class PricesError(ValueError):
    """CHATBOT_MODEL_PRICES is not the JSON object it must be."""


@dataclass(frozen=True, slots=True)
class Price:
    """One model's prices, USD per million tokens."""

    input: float
    output: float
    cached_input: float

    def cost(self, input_tokens: int, output_tokens: int, cached_input_tokens: int) -> float:
        """Return the USD cost of these counts; cached input tokens are billed at their own price."""
        uncached = max(0, input_tokens - cached_input_tokens)
        total = uncached * self.input + cached_input_tokens * self.cached_input + output_tokens * self.output
        return total / 1_000_000


def parse_prices(raw: str | None) -> dict[str, Price]:
    """Return the configured prices ({} when unset); raise PricesError naming what is wrong."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise PricesError("CHATBOT_MODEL_PRICES is not valid JSON") from exc
    if not isinstance(value, dict):
        raise PricesError('CHATBOT_MODEL_PRICES must be {"provider:model": {"input": ..., "output": ...}}')
    prices = {}
    for model, entry in value.items():
        numbers = {k: entry.get(k) for k in ("input", "output", "cached_input")} if isinstance(entry, dict) else {}
        if not numbers or not all(v is None or _number(v) for v in numbers.values()):
            raise PricesError(f"CHATBOT_MODEL_PRICES[{model!r}] needs numbers: input, output, cached_input")
        paid_in = float(numbers["input"] or 0)
        cached = numbers["cached_input"]
        prices[str(model)] = Price(paid_in, float(numbers["output"] or 0), paid_in if cached is None else float(cached))
    return prices


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
