"""Chat-model factory: `CHATBOT_MODEL` = "offline" or "provider:model"."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

OFFLINE = "offline"


class ModelConfigError(ValueError):
    """The configured model cannot be loaded (unknown provider, missing extra)."""


def load_chat_model(spec: str, *, base_url: str | None = None, timeout: float = 60.0) -> BaseChatModel | None:
    """Return the configured chat model, or None for the offline responder.

    Providers come as optional extras (`pip install chatbot[openai]`, `[anthropic]`,
    `[ollama]`); an OpenAI-compatible server is `openai:<model>` with `CHATBOT_MODEL_BASE_URL`.
    """
    if spec.strip().lower() == OFFLINE:
        return None
    provider, sep, model = spec.partition(":")
    if not sep or not provider or not model:
        raise ModelConfigError(f"CHATBOT_MODEL must be 'offline' or 'provider:model', got {spec!r}")
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"timeout": timeout, "max_retries": 1}
    if base_url:
        kwargs["base_url"] = base_url
    try:
        return init_chat_model(model, model_provider=provider, **kwargs)
    except ImportError as exc:
        raise ModelConfigError(f"the {provider!r} provider needs its extra: pip install 'chatbot[{provider}]'") from exc
