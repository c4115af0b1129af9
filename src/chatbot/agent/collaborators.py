"""What the graph's nodes need from the outside, bound once when the graph is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from chatbot.budgets.service import Budgets
from chatbot.caller import CallerContext
from chatbot.config import Settings
from chatbot.memory.jobs import MemorySink, drop_memory_job
from chatbot.memory.read import MemoryReader
from chatbot.models.chain import ChainEntry
from chatbot.recall.service import Recaller
from chatbot.responses import QuotedChunk

Retriever = Callable[[CallerContext, str], Awaitable[Sequence[QuotedChunk]]]
PromptRegistry = Callable[[str, str], Awaitable[None]]
"""Called as `registry(sha256, text)` before a system prompt is used: stores its text once."""


async def no_retrieval(_: CallerContext, __: str) -> Sequence[QuotedChunk]:
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
    chain: tuple[ChainEntry, ...] = ()
    """The answer models in fallback order (models/chain.py); empty: `chat_model`, else offline."""
    chat_model: BaseChatModel | None = None
    """One model answering alone (tests, Studio): a chain of one. None with no chain: the offline responder."""
    summary_model: ChainEntry | None = None
    """The model that folds the rolling summary (`CHATBOT_SUMMARY_MODEL`); None: the first answer model."""
    memory_sink: MemorySink = drop_memory_job
    memory_reader: MemoryReader | None = None
    """Reads the user's profile and facts at the start of a run (memory/read.py); None: the
    graph's LangGraph store, when it has one (Studio)."""
    window_observer: Callable[[Sequence[BaseMessage]], None] | None = field(default=None)
    """Sees every model window built (tests and diagnostics); must not keep references long."""
    prompt_registry: PromptRegistry | None = None
    """Keeps the text of each system prompt a run record names by hash; None: not kept."""
    budgets: Budgets | None = None
    """Spending caps a summary fold's model call is reserved against (budgets/); None: unchecked.
    The answer call's reservation is the run service's, made before the run starts."""
    recall: Recaller | None = None
    """Finds the thread's earlier turns that left the window (recall/); None: no recall (Studio)."""

    def answer_chain(self) -> tuple[ChainEntry, ...]:
        """Return the models that answer, in fallback order; empty for the offline responder."""
        if self.chain:
            return self.chain
        if self.chat_model is not None:
            return (ChainEntry(f"custom:{type(self.chat_model).__name__}", self.chat_model),)
        return ()

    def summariser(self) -> ChainEntry | None:
        """Return the model that folds summaries; None: the offline fold."""
        if self.summary_model is not None:
            return self.summary_model
        chain = self.answer_chain()
        return chain[0] if chain else None
