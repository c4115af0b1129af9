"""The model chain: `CHATBOT_MODEL` as a fallback list of `provider:model` entries.

Each entry gets its own base URL (`CHATBOT_MODEL_BASE_URL` for the first,
`CHATBOT_MODEL_BASE_URLS` for each), written as the provider's documentation shows it and
normalised here: the Anthropic SDK appends `/v1` itself, so `http://host/v1` (the form the
OpenAI docs show) would post to `/v1/v1/messages` and fail every run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel

if TYPE_CHECKING:
    from chatbot.config import Settings

OFFLINE = "offline"
# Providers whose client reports why a stream stopped (finish_reason / stop_reason /
# done_reason): with them a stream that ends without saying so was cut short.
REPORTS_FINISH = frozenset({"openai", "anthropic", "ollama"})
# The variable each provider package reads its key from.
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


class ModelConfigError(ValueError):
    """The configured model cannot be loaded (unknown provider, missing extra, bad spec)."""


@dataclass(frozen=True, slots=True)
class ChainEntry:
    """One model of the chain, ready to call."""

    spec: str
    """`provider:model`, as configured: the name runs, records and metrics carry."""
    model: BaseChatModel

    @property
    def provider(self) -> str:
        """Return the provider part of the spec (`openai`, `anthropic`, ...)."""
        return self.spec.partition(":")[0].lower()

    @property
    def reports_finish(self) -> bool:
        """Tell whether this provider's stream says why it stopped."""
        return self.provider in REPORTS_FINISH


def parse_chain(model: str) -> list[str]:
    """Return the chain's specs in order; `offline` is a chain of one."""
    specs = [part.strip() for part in model.split(",") if part.strip()]
    if not specs:
        raise ModelConfigError("CHATBOT_MODEL is empty: use 'offline' or 'provider:model[,provider:model...]'")
    for spec in specs:
        if spec.lower() == OFFLINE:
            if len(specs) > 1:
                raise ModelConfigError("'offline' cannot be part of a fallback chain")
            continue
        provider, sep, name = spec.partition(":")
        if not sep or not provider or not name:
            raise ModelConfigError(f"CHATBOT_MODEL entries must be 'provider:model', got {spec!r}")
    return specs


def base_urls_for(specs: list[str], first: str | None, each: str | None) -> list[str | None]:
    """Return each entry's base URL: `each` (comma-separated, empty = default), `first` for entry one."""
    listed = [part.strip() or None for part in each.split(",")] if each else []
    urls: list[str | None] = [listed[i] if i < len(listed) else None for i in range(len(specs))]
    if first and specs:
        urls[0] = first
    return urls


def normalise_base_url(provider: str, url: str | None) -> str | None:
    """Return `url` in the form the provider's SDK expects."""
    if not url:
        return None
    url = url.strip().rstrip("/")
    if provider == "anthropic" and url.endswith("/v1"):
        url = url[: -len("/v1")]  # the Anthropic SDK appends /v1 to every path itself
    return url


def load_model(
    spec: str,
    *,
    base_url: str | None = None,
    timeout: float = 60.0,
    retries: int = 1,
    max_output_tokens: int | None = None,
) -> BaseChatModel:
    """Return the chat model of one `provider:model` entry.

    Providers come as optional extras (`pip install 'chatbot[openai]'`, `[anthropic]`,
    `[ollama]`); an OpenAI-compatible server is `openai:<model>` with its base URL.
    """
    provider, _, name = spec.partition(":")
    provider = provider.lower()
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"timeout": timeout, "max_retries": retries}
    url = normalise_base_url(provider, base_url)
    if url:
        kwargs["base_url"] = url
    if max_output_tokens is not None:
        # The call's output cap: what a budget reserves as the output of its worst case.
        kwargs["num_predict" if provider == "ollama" else "max_tokens"] = max_output_tokens
    if provider == "openai":
        # langchain-openai asks for usage in streams only without a base URL: ask always.
        kwargs["stream_usage"] = True
        # Its own gap bound wraps each chunk in asyncio.wait_for, which on Python 3.11 can
        # swallow a cancel that lands as a chunk arrives (the stream then runs to its end);
        # the idle bound of agent/modelcall.py does the same job without that.
        kwargs["stream_chunk_timeout"] = 0
    key = KEY_VARIABLES.get(provider)
    if key is not None and not url and not os.environ.get(key):
        # Some clients build without a key and fail only at the first call, as unreachable.
        raise ModelConfigError(f"{spec}: no API key: export {key}, or use CHATBOT_MODEL=offline.")
    try:
        return init_chat_model(name, model_provider=provider, **kwargs)
    except ImportError as exc:
        raise ModelConfigError(
            f"the {provider!r} provider needs its extra: pip install 'chatbot[{provider}]'."
        ) from exc
    except Exception as exc:
        # The provider packages refuse to build a client without their key, each with an
        # exception of its own (OpenAIError, a pydantic ValidationError, ...).
        if key is not None and not os.environ.get(key):
            raise ModelConfigError(
                f"{spec}: no API key: export {key} (any value for a server that takes none), "
                "or use CHATBOT_MODEL=offline."
            ) from exc
        if isinstance(exc, ValueError) and "Unsupported" in str(exc):
            raise ModelConfigError(
                f"{spec}: unknown provider {provider!r}: "
                "use openai, anthropic or ollama (as provider:model), or offline."
            ) from exc
        raise ModelConfigError(f"cannot load model {spec!r} ({type(exc).__name__}): check the model name.") from exc


@dataclass(frozen=True, slots=True)
class Models:
    """Every model a replica calls: the answer chain, and the memory and summary models."""

    answer: list[ChainEntry]
    memory: ChainEntry | None
    summary: ChainEntry | None


def _client_timeout(settings: Settings) -> float:
    # The client's own read timeout must not cut what our bounds allow (a gap of up to the
    # idle timeout, a first token after up to its timeout); ours fire first and name the phase.
    return max(settings.model_first_token_timeout_seconds, settings.model_idle_timeout_seconds) + 5


def load_models(settings: Settings) -> Models:
    """Return the replica's models; with `offline`, none (memory and summary work offline too).

    The memory and summary models take the base URL of the first chain entry of their
    provider: a cheaper model of the same OpenAI-compatible server needs no setting of its own.
    """
    timeout = _client_timeout(settings)
    cap = settings.model_max_output_tokens
    specs = parse_chain(settings.model)
    if specs[0].lower() == OFFLINE:
        return Models([], None, None)
    urls = base_urls_for(specs, settings.model_base_url, settings.model_base_urls)
    # An entry with a successor does not retry by itself: the next entry is its retry, at
    # once, where the client's own backoff would add half a second or more to the first token.
    last = len(specs) - 1
    answer = [
        ChainEntry(
            spec, load_model(spec, base_url=url, timeout=timeout, retries=1 if i == last else 0, max_output_tokens=cap)
        )
        for i, (spec, url) in enumerate(zip(specs, urls, strict=True))
    ]

    def side_model(spec: str | None) -> ChainEntry:
        if not spec or spec.strip() == answer[0].spec:
            return answer[0]
        (only,) = parse_chain(spec)
        if only.lower() == OFFLINE:
            raise ModelConfigError("CHATBOT_MEMORY_MODEL and CHATBOT_SUMMARY_MODEL take 'provider:model'")
        provider = only.partition(":")[0].lower()
        url = next((u for e, u in zip(answer, urls, strict=True) if e.provider == provider), None)
        return ChainEntry(only, load_model(only, base_url=url, timeout=timeout, max_output_tokens=cap))

    return Models(answer, side_model(settings.memory_model), side_model(settings.summary_model))
