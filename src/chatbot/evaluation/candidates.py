"""The models an evaluation compares: `--model` specs in the chain syntax of CHATBOT_MODEL."""

from __future__ import annotations

from dataclasses import dataclass

from chatbot.config import Settings
from chatbot.models.chain import OFFLINE, ChainEntry, base_urls_for, load_model, parse_chain


@dataclass(frozen=True, slots=True)
class Candidate:
    """One `--model` spec, loaded: its answer chain (empty for the offline responder)."""

    name: str
    """The spec as given, its entries comma-joined: the report's `model`."""
    chain: tuple[ChainEntry, ...]


def configured_base_urls(settings: Settings) -> dict[str, str | None]:
    """Return the base URL CHATBOT_MODEL_BASE_URL(S) gives each entry of CHATBOT_MODEL, by spec."""
    specs = parse_chain(settings.model)
    if specs[0].lower() == OFFLINE:
        return {}
    urls = base_urls_for(specs, settings.model_base_url, settings.model_base_urls)
    found: dict[str, str | None] = {}
    for spec, url in zip(specs, urls, strict=True):
        found.setdefault(spec, url)
    return found


def load_candidate(spec: str, settings: Settings) -> Candidate:
    """Return the candidate of one `--model` spec; raise ModelConfigError when it cannot be loaded.

    An entry takes the base URL CHATBOT_MODEL_BASE_URL(S) gives the same entry of
    CHATBOT_MODEL, else its provider package's default. Timeouts and retries are the
    replica's: the client's own read timeout sits above the run's bounds, and only the last
    entry of a chain retries by itself (the next entry is the others' retry).
    """
    specs = parse_chain(spec)
    name = ",".join(specs)
    if specs[0].lower() == OFFLINE:
        return Candidate(OFFLINE, ())
    urls = configured_base_urls(settings)
    timeout = max(settings.model_first_token_timeout_seconds, settings.model_idle_timeout_seconds) + 5
    last = len(specs) - 1
    cap = settings.model_max_output_tokens  # as the replicas cap every call
    chain = tuple(
        ChainEntry(
            entry,
            load_model(
                entry, base_url=urls.get(entry), timeout=timeout, retries=1 if i == last else 0, max_output_tokens=cap
            ),
        )
        for i, entry in enumerate(specs)
    )
    return Candidate(name, chain)
