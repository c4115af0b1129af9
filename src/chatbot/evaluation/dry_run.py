"""One case through a dry copy of the conversational graph: the same nodes, nothing kept.

The graph is compiled per run with an in-memory checkpointer and an in-memory store, a
memory sink that drops the answered turn's job and no system prompt registry; the usage
totals are written by the run service, which is not involved. So the only database work
is retrieval's reads of the tenant's knowledge base.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.agent.modelcall import answer_input_floor
from chatbot.agent.outcome import GraphEvent, Token
from chatbot.agent.run import run_graph
from chatbot.agent.state import ConversationState
from chatbot.budgets.service import BudgetExhausted, Budgets, Reservation
from chatbot.caller import CallerContext
from chatbot.config import Settings
from chatbot.evaluation.candidates import Candidate
from chatbot.evaluation.cases import Case, RecordedWindow
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.memory.jobs import drop_memory_job
from chatbot.memory.namespaces import PROFILE_KEY, facts_namespace, profile_namespace
from chatbot.recall.service import RecordedRecall
from chatbot.responses import ModelCallUsage, QuotedChunk

Search = Callable[[CallerContext, str], Awaitable[Sequence[QuotedChunk]]]
EVAL_USER = UserId("eval")
"""The user every case runs as: its memory is the in-memory store of that one run."""


class ResultReport(TypedDict):
    """One model's result of one case, as report.json shows it."""

    model: str
    status: str
    citations: list[str]
    answer: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class CaseResult:
    """What one candidate made of one case."""

    case_id: str
    model: str
    status: str
    """answered, clarifying or escalate; `error` when the run failed."""
    citations: list[str]
    answer: str | None
    """The answer; for a failed run the part shown before it failed, or None."""
    error: str | None
    """The failure's reason (chatbot/failures.py: model_failed, model_incomplete, model_timeout, ...)."""
    latency_ms: float
    ttft_ms: float | None
    usage: list[ModelCallUsage] = field(default_factory=list)

    def as_report(self) -> ResultReport:
        """Return the result as report.json shows it."""
        return ResultReport(
            model=self.model, status=self.status, citations=self.citations, answer=self.answer, error=self.error
        )


def _history(case: Case) -> list[AnyMessage]:
    messages: list[AnyMessage] = []
    for turn in case.history:
        kind = HumanMessage if turn.role == "user" else AIMessage
        messages.append(kind(content=turn.content, id=turn.id or str(uuid.uuid4())))
    return messages


def _recorded_store(window: RecordedWindow | None, tenant_id: TenantId) -> InMemoryStore:
    """Return a store holding the recorded profile and facts (none for a dataset case)."""
    store = InMemoryStore()
    if window is None:
        return store
    if window.profile:
        store.put(profile_namespace(tenant_id, EVAL_USER), PROFILE_KEY, dict(window.profile))
    for index, fact in enumerate(window.facts):
        # In the recorded order: the in-memory store lists items as they were put.
        store.put(facts_namespace(tenant_id, EVAL_USER), f"fact-{index:04d}", {"text": fact})
    return store


def _retriever(case: Case, search: Search) -> Search:
    """Return the case's retriever: the recorded chunks of a replayed run, else a search of the knowledge base."""
    window = case.window
    if window is None:
        return search
    chunks = list(window.chunks)

    async def recorded(_: CallerContext, __: str) -> Sequence[QuotedChunk]:
        return chunks

    return recorded


async def run_case(
    case: Case,
    candidate: Candidate,
    *,
    tenant_id: TenantId,
    settings: Settings,
    search: Search,
    budgets: Budgets | None = None,
) -> CaseResult:
    """Run `case` through a dry graph answering with `candidate`; a failure is a result, never raised.

    With `budgets` (`chatbot eval --charge-tenant`) the case's model calls are reserved and
    charged against the tenant's budgets, as the eval user; a case that does not fit is a
    result with the error `budget_exhausted`. Without, nothing is counted against them.
    """
    if budgets is None or not candidate.chain:
        return await _run_case(case, candidate, tenant_id=tenant_id, settings=settings, search=search, budgets=None)
    specs = [entry.spec for entry in candidate.chain]
    try:
        # Held as a run's answer is: early, then sized to the case's window at the model step.
        language = "fa" if case.locale.lower().startswith("fa") else "en"
        floor = answer_input_floor(specs[0], case.question, language, settings.context_tokens)
        reservation = await budgets.admit(tenant_id, EVAL_USER, specs, input_floor=floor)
    except BudgetExhausted:
        return CaseResult(case.id, candidate.name, "error", [], None, "budget_exhausted", 0.0, None)
    result: CaseResult | None = None
    try:
        result = await _run_case(
            case, candidate, tenant_id=tenant_id, settings=settings, search=search, budgets=budgets, held=reservation
        )
        return result
    finally:
        # Also when the evaluation is interrupted: the hold is given back before the process exits.
        answers = [] if result is None else [call for call in result.usage if call.kind == "answer"]
        await budgets.settle(reservation, answers)


async def _run_case(
    case: Case,
    candidate: Candidate,
    *,
    tenant_id: TenantId,
    settings: Settings,
    search: Search,
    budgets: Budgets | None,
    held: Reservation | None = None,
) -> CaseResult:
    update: dict[str, str | int] = {"model": candidate.name}
    if case.window is not None and case.window.context_tokens:
        update["context_tokens"] = case.window.context_tokens
    deps = AgentDeps(
        settings=settings.model_copy(update=update),
        retriever=_retriever(case, search),
        chain=candidate.chain,
        memory_sink=drop_memory_job,
        prompt_registry=None,
        budgets=budgets,  # the summary fold's call, when the tenant is charged
        # A replayed run gets the earlier turns its thread's recall gave it, as they were.
        recall=RecordedRecall(case.window.recalled) if case.window is not None and case.window.recalled else None,
    )
    graph = build_graph(deps).compile(checkpointer=InMemorySaver(), store=_recorded_store(case.window, tenant_id))
    question = HumanMessage(content=case.question, id=str(uuid.uuid4()))
    state: ConversationState = {"messages": [*_history(case), question], "turn": [question], "record": ""}
    if case.window is not None and case.window.summary:
        state["summary"] = case.window.summary
    thread_id = ThreadId(f"eval-{uuid.uuid4()}")
    started = time.perf_counter()
    first_token: list[float] = []

    def on_event(event: GraphEvent) -> None:
        if not first_token and isinstance(event, Token):
            first_token.append(time.perf_counter())

    context = Context(
        tenant_id=tenant_id,
        user_id=EVAL_USER,
        locale=case.locale,
        run_id=RunId(str(uuid.uuid4())),
        thread_id=thread_id,
        events=on_event,
        size_answer=None if budgets is None else budgets.sizer(held),
    )
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    result = await run_graph(graph, state, config, context)
    elapsed = time.perf_counter() - started
    if result.raised is not None and not isinstance(result.raised, Exception):
        raise result.raised  # cancelled: the evaluation stops; a failed case is reported
    outcome = result.outcome
    answer: str | None = outcome.answer if outcome is not None and outcome.failure is None else None
    failure = result.failure
    error = None if failure is None else failure.reason
    if failure is None and outcome is not None:
        status = outcome.status
    else:
        status = "error"
        if result.raised is None and result.shown:
            answer = result.shown
    return CaseResult(
        case_id=case.id,
        model=candidate.name,
        status=status,
        citations=[str(c) for c in outcome.citations] if outcome is not None and failure is None else [],
        answer=answer,
        error=error,
        latency_ms=round(elapsed * 1000, 1),
        ttft_ms=round((first_token[0] - started) * 1000, 1) if first_token else None,
        usage=list(result.usage),
    )
