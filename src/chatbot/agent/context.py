"""Per-run values the graph's nodes read: who is calling, and which run this is.

They reach nodes as LangGraph runtime context on every invocation, never through state,
so a stale checkpoint can never override the caller of the current run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chatbot.agent.outcome import EventSink
from chatbot.agent.result import RunResult
from chatbot.budgets.service import AnswerSizer
from chatbot.caller import CallerContext
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.memory.jobs import RunEnded as RunEnded  # the run service makes it (threads/runs.py)

if TYPE_CHECKING:
    from chatbot.agent.early import EarlyReads


@dataclass(frozen=True, kw_only=True)
class Context:
    """The caller and run of one graph invocation."""

    tenant_id: TenantId
    """Tenant from the service token; first label of every store namespace and the retrieval scope."""

    user_id: UserId
    """User from the service token; owner of the long-term memory read and written this run."""

    locale: str = "fa-IR"
    """BCP 47 locale from the token; `fa*` answers in Persian, anything else in English."""

    run_id: RunId
    """The run's UUID, also recorded in checkpoint metadata and on the turn's messages."""

    thread_id: ThreadId
    """The thread (the backend's chat session id) this run belongs to."""

    result: RunResult = field(default_factory=RunResult, compare=False, repr=False)
    """What this run gives its caller, filled in by the nodes and never persisted: the
    retrieved chunks' text goes from `retrieve` to `generate` here, so no checkpoint (nor a
    failed run's writes) holds it (agent/result.py; agent/run.py returns it)."""

    events: EventSink | None = field(default=None, compare=False, repr=False)
    """Where the run's events go as they happen (agent/outcome.py); None: the graph's custom stream."""

    handoffs: list[asyncio.Future[None]] | None = field(default=None, compare=False, repr=False)
    """Work a node started that must be done before the run's `end` goes out (the memory
    job's row): the run service awaits it after the graph, so it runs beside the final
    checkpoint write instead of before it. None: the node awaits its own (Studio, eval)."""

    ended: RunEnded | None = field(default=None, compare=False, repr=False)
    """How the run ended ("answered" or "other"), set by the run service once the final
    checkpoint is written or refused; a memory job of the run waits on it (memory/jobs.py)."""

    size_answer: AnswerSizer | None = field(default=None, compare=False, repr=False)
    """Sizes each answer call against the caller's budgets once its window is counted: the
    output it may produce (its `max_tokens`), or BudgetExhausted. None: no budget applies."""

    early: EarlyReads | None = field(default=None, compare=False, repr=False)
    """The run's memory read and knowledge search, started before the graph (agent/early.py);
    None: the nodes read for themselves."""

    @property
    def caller(self) -> CallerContext:
        """Return the caller as the retrieval and memory layers take it."""
        return CallerContext(tenant_id=self.tenant_id, user_id=self.user_id, locale=self.locale)

    @property
    def language(self) -> str:
        """Return "fa" or "en", the language answers are written in."""
        return self.caller.language
