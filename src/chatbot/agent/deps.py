"""What the graph's nodes need from the outside, bound once when the graph is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from chatbot.caller import CallerContext

Retriever = Callable[[CallerContext, str], Awaitable[Sequence[Mapping[str, Any]]]]


@dataclass(frozen=True, slots=True)
class MemoryJob:
    """One answered turn handed to the memory writer, after the answer."""

    tenant_id: str
    user_id: str
    thread_id: str
    run_id: str
    locale: str
    user_text: str


MemorySink = Callable[[MemoryJob], None]
PromptRegistry = Callable[[str, str], Awaitable[None]]
"""Called as `registry(sha256, text)` before a system prompt is used: stores its text once."""


async def no_retrieval(_: CallerContext, __: str) -> Sequence[Mapping[str, Any]]:
    """Return no chunks (a graph built without a knowledge base)."""
    return []


def drop_memory_job(_: MemoryJob) -> None:
    """Forget a memory job (a graph built without a memory writer)."""


@dataclass(frozen=True, kw_only=True)
class AgentDeps:
    """Collaborators and limits of the conversational graph."""

    retriever: Retriever = no_retrieval
    chat_model: BaseChatModel | None = None
    """None: the offline responder answers."""
    model_name: str = "offline"
    model_timeout_seconds: float = 60.0
    offline_token_delay_ms: int = 0
    context_tokens: int = 6000
    summary_after_turns: int = 20
    memory_max_facts: int = 50
    memory_sink: MemorySink = drop_memory_job
    window_observer: Callable[[Sequence[BaseMessage]], None] | None = field(default=None)
    """Sees every model window built (tests and diagnostics); must not keep references long."""
    prompt_registry: PromptRegistry | None = None
    """Keeps the text of each system prompt a run record names by hash; None: not kept."""
