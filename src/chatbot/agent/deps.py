"""What the graph's nodes need from the outside, bound once when the graph is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from chatbot.caller import CallerContext
from chatbot.config import Settings
from chatbot.memory.jobs import MemorySink, drop_memory_job

Retriever = Callable[[CallerContext, str], Awaitable[Sequence[Mapping[str, Any]]]]
PromptRegistry = Callable[[str, str], Awaitable[None]]
"""Called as `registry(sha256, text)` before a system prompt is used: stores its text once."""


async def no_retrieval(_: CallerContext, __: str) -> Sequence[Mapping[str, Any]]:
    """Return no chunks (a graph built without a knowledge base)."""
    return []


def standalone_settings() -> Settings:
    """Return the settings of a graph built on its own (Studio, benchmarks): CHATBOT_* or defaults.

    `environment="dev"`: the graph reads no token keys, so their start-up checks do not apply.
    """
    return Settings(environment="dev")


@dataclass(frozen=True, kw_only=True)
class AgentDeps:
    """Collaborators and settings of the conversational graph."""

    settings: Settings = field(default_factory=standalone_settings)
    """The replica's settings, as one object: the nodes read the model name and timeout,
    the offline token delay, the context budget, the summary threshold and the fact limit."""
    retriever: Retriever = no_retrieval
    chat_model: BaseChatModel | None = None
    """None: the offline responder answers."""
    memory_sink: MemorySink = drop_memory_job
    window_observer: Callable[[Sequence[BaseMessage]], None] | None = field(default=None)
    """Sees every model window built (tests and diagnostics); must not keep references long."""
    prompt_registry: PromptRegistry | None = None
    """Keeps the text of each system prompt a run record names by hash; None: not kept."""
