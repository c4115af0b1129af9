"""The nodes of the conversational graph: (load_memory | retrieve) -> generate -> write_memory."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.config import get_config, get_stream_writer
from langgraph.runtime import Runtime
from pydantic import JsonValue

from chatbot import metrics
from chatbot.agent._handoff import handoff_context
from chatbot.agent._index_later import IndexLater
from chatbot.agent._prompts import system_prompt
from chatbot.agent._recall import RecallAsk, Recalled, RecallStep
from chatbot.agent._summary import fold_summary, messages_to_fold
from chatbot.agent._tokens import token_counter_for
from chatbot.agent._window import Window, WindowInputs, build_window
from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.modelcall import ModelAnswer, ModelFailure, TimeLimits, ask_model
from chatbot.agent.outcome import EventSink, GraphOutcome, StageProgress, Token, custom_stream_sink
from chatbot.agent.record import chunk_refs, chunk_versions, prompt_sha256, shortened_parts, window_by_ids
from chatbot.agent.state import (
    FOLD_BATCH,
    RECENT_MESSAGES,
    WINDOW_HISTORY,
    ConversationState,
    Outcome,
)
from chatbot.budgets.service import BudgetExhausted, Held, with_output_cap
from chatbot.db.run_record import RecordedRun
from chatbot.db.saver import run_fence
from chatbot.failures import Failure
from chatbot.memory.extraction import MemoryCandidates, extract_offline
from chatbot.memory.facts import Fact
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.namespaces import PROFILE_KEY, facts_namespace, profile_namespace, user_prefix
from chatbot.memory.read import Remembered
from chatbot.models.chain import ChainEntry
from chatbot.models.offline import MemoryRequest, leans_on_thread, offline_reply, rank_candidates, split_tokens
from chatbot.recall.service import IndexWriter
from chatbot.responses import ModelCallUsage, QuotedChunk
from chatbot.timestamps import now_rfc3339
from chatbot.turns import META_KEY

# A summary fold's request beside the messages it folds: its instructions and task template.
_FOLD_OVERHEAD_TOKENS = 1024


# Retrieved chunks a run keeps (the model's prompt, the record); the retriever finds more,
# for the offline responder to rank by section first (models/offline.py).
MODEL_CHUNKS = 5


class Nodes:
    """The graph's node functions, bound to their collaborators."""

    def __init__(self, deps: AgentDeps) -> None:
        self.deps = deps
        self.settings = deps.settings
        self.counter = token_counter_for(deps.settings.model)

    async def load_memory(self, state: ConversationState, runtime: Runtime[Context]) -> ConversationState:
        """Read the user's profile and facts; start the turn with no outcome (`retrieve` sets the chunks)."""
        ctx = runtime.context
        profile: dict[str, JsonValue] = {}
        facts: list[str] = []
        # Two reads, each of one store prefix (memory/read.py), newest fact first; started
        # before the graph when the run service could (agent/early.py).
        reading: Awaitable[Remembered] | None = ctx.early.memory if ctx.early is not None else None
        if reading is None and self.deps.memory_reader is not None:
            reading = self.deps.memory_reader(ctx.tenant_id, ctx.user_id)
        if reading is not None:
            remembered = await reading
            profile = remembered.profile
            facts = [fact.text for fact in (Fact.from_stored(item.value) for item in remembered.facts) if fact.text]
        elif runtime.store is not None:
            # A graph outside the service (Studio): its own store, one search over the user's
            # prefix; the explicit limit matters (asearch returns 10 items by default).
            found = await runtime.store.asearch(
                user_prefix(ctx.tenant_id, ctx.user_id), limit=self.settings.memory_max_facts + 1
            )
            profile_ns, facts_ns = (
                profile_namespace(ctx.tenant_id, ctx.user_id),
                facts_namespace(ctx.tenant_id, ctx.user_id),
            )
            for item in found:
                if item.namespace == profile_ns and item.key == PROFILE_KEY:
                    profile = dict(item.value)
                elif item.namespace == facts_ns and (fact := Fact.from_stored(item.value)).text:
                    facts.append(fact.text)
        return ConversationState(profile=profile, facts=facts, outcome=Outcome())

    async def retrieve(self, state: ConversationState, runtime: Runtime[Context]) -> ConversationState:
        """Find this turn's knowledge chunks for the user's question."""
        emit = _events(runtime.context)
        emit(StageProgress("retrieval", status="started"))
        question = str(state["messages"][-1].text)
        early = runtime.context.early
        if early is not None and early.question == question:
            chunks = list(await early.chunks)  # started before the graph (agent/early.py)
        else:
            chunks = list(await self.deps.retriever(runtime.context.caller, question))
        if not self.deps.answer_chain():
            chunks = await self._offline_chunks(state, runtime.context, question, chunks)
        chunks = chunks[:MODEL_CHUNKS]
        emit(StageProgress("retrieval", chunks=len(chunks)))
        # The text stays in this run's memory; state (and so any checkpoint) gets ids only.
        runtime.context.result.chunks = chunks
        refs = chunk_refs(chunks)
        # A partial record (no status): what a run that fails from here on retrieved.
        partial = RecordedRun(runtime.context.run_id, model=self.settings.model, retrieved=chunk_versions(chunks))
        return ConversationState(retrieved=refs, record=partial.dump())

    async def _offline_chunks(
        self, state: ConversationState, ctx: Context, question: str, chunks: list[QuotedChunk]
    ) -> list[QuotedChunk]:
        """Order the candidates for the offline responder, the thread's topic included.

        A model reads the thread and resolves "and for the premium plan?" itself; the offline
        responder can only quote what was retrieved, so a message that leans on the thread
        (`leans_on_thread`) is also searched with the question before it, and the candidates are
        ranked by section, the thread's words counted too (models/offline.py).
        """
        earlier = [str(m.text) for m in state["messages"][:-1] if isinstance(m, HumanMessage)][-2:]
        if earlier and leans_on_thread(question):
            found = await self.deps.retriever(ctx.caller, f"{earlier[-1]} {question}")
            seen = {c.chunk_id for c in chunks}
            chunks = chunks + [c for c in found if c.chunk_id not in seen]
        return rank_candidates(question, chunks, language=ctx.language, thread=earlier)

    async def generate(self, state: ConversationState, runtime: Runtime[Context]) -> ConversationState:
        """Answer the question from the window, stream it, and decide the turn's status."""
        ctx = runtime.context
        messages = state["messages"]
        question = messages[-1]
        if not isinstance(question, HumanMessage):
            raise ValueError("a run must end its input with the user's message")
        history = messages[:-1]
        chunks = self._chunks(state, ctx)
        turns = state.get("turns", 0) + 1
        prompt = system_prompt(ctx.language)
        prompt_sha = prompt_sha256(prompt)
        if self.deps.prompt_registry is not None:
            await self.deps.prompt_registry(prompt_sha, prompt)
        parts, window, update = await self._window_and_summary(state, history, question, chunks, turns, ctx)
        summary = parts.summary
        # The run's config carries its thread lease's fence (db/saver.py): recall's writes pass it,
        # and those the search did not need wait for the answer (agent/_index_later.py).
        index_later = IndexLater(ctx)
        recalled = await self._recall(
            parts, window, ctx, IndexWriter(ctx.tenant_id, ctx.user_id, run_fence(get_config()), index_later.defer)
        )
        window = recalled.window
        ctx.result.recalled = recalled.turns
        if self.deps.window_observer is not None:
            self.deps.window_observer(window.messages)
        streak = state.get("unanswered_streak", 0)
        model = self.settings.model
        if not self.deps.answer_chain():
            # The offline rules run once per turn: their result answers "noted" here and is
            # what the memory writer stores after the answer (write_memory hands it over).
            candidates = extract_offline(str(question.text), locale=ctx.locale)
            ctx.result.memory_candidates = candidates
            reply = offline_reply(
                str(question.text),
                chunks,
                language=ctx.language,
                unanswered_streak=streak,
                memory_request=_memory_request(candidates),
                profile=state.get("profile") or {},
                facts=state.get("facts") or [],
            )
            await self._stream_offline(reply.content, _events(ctx))
            self._usage(ctx).append(ModelCallUsage(kind="answer", model=model))
        else:
            try:
                answered = await self._ask_model(window, chunks, ctx)
            except ModelFailure as failure:
                index_later.start()
                return self._failed(ctx, failure, turns, question, recalled, prompt_sha, chunks, history)
            reply, model = answered.reply, answered.model
            self._usage(ctx).extend(answered.usage)
        index_later.start()
        answer = AIMessage(
            content=reply.content,
            id=str(uuid.uuid4()),
            additional_kwargs={
                META_KEY: {
                    "created_at": now_rfc3339(),
                    "run_id": ctx.run_id,
                    "citations": reply.citations,
                    "status": reply.status,
                }
            },
        )
        outcome = GraphOutcome(
            reply.status,
            answer=reply.content,
            message_id=str(answer.id),
            citations=reply.citations,
            handoff_context=handoff_context(reply, state, question, summary, ctx.language)
            if reply.status == "escalate"
            else None,
        )
        ending = RecordedRun(
            ctx.run_id, status=reply.status, model=model, answer_id=str(answer.id), usage=self._usage_record(ctx)
        )
        record = self._record(ctx, ending, question, recalled, prompt_sha, chunks, history)
        return update | {
            "turns": turns,
            "messages": [answer],
            "turn": [question, answer],
            "outcome": outcome.stored(),
            "record": record,
            "unanswered_streak": 0 if reply.status == "answered" else streak + 1,
        }

    def _failed(
        self,
        ctx: Context,
        failure: ModelFailure,
        turns: int,
        question: HumanMessage,
        recalled: Recalled,
        prompt_sha: str,
        chunks: list[QuotedChunk],
        history: list[Any],
    ) -> ConversationState:
        """Return the update of a turn whose model failed: the reason and what was shown, no answer.

        The answer is not added to the conversation (the transcript holds finished answers
        only); the text the user saw stays in the run record, marked incomplete. No summary
        fold is kept and no memory work follows (the graph ends on a failed outcome).
        """
        self._usage(ctx).extend(failure.usage)
        ctx.result.model_failure = failure
        outcome = GraphOutcome("error", failure=Failure(failure.reason, failure.retry_after))
        ending = RecordedRun(
            ctx.run_id,
            status="error",
            reason=failure.reason,
            model=failure.model or self.settings.model,
            answer_id=str(uuid.uuid4()),
            shown=failure.shown,
            usage=self._usage_record(ctx),
        )
        return ConversationState(
            turns=turns,
            outcome=outcome.stored(),
            record=self._record(ctx, ending, question, recalled, prompt_sha, chunks, history),
        )

    @staticmethod
    def _usage(ctx: Context) -> list[ModelCallUsage]:
        """Return this run's model calls so far (the summary fold's, then the answer's)."""
        return ctx.result.usage

    def _usage_record(self, ctx: Context) -> tuple[dict[str, JsonValue], ...]:
        calls = self._usage(ctx)
        for call in calls:
            metrics.count_tokens(
                ctx.tenant_id, call.model, call.kind, call.input_tokens, call.output_tokens, call.cached_input_tokens
            )
        return tuple(call.model_dump() for call in calls)

    @staticmethod
    def _chunks(state: ConversationState, ctx: Context) -> list[QuotedChunk]:
        """Return this run's retrieved chunks, text included, from the run's own memory."""
        wanted = [tuple(ref) for ref in state.get("retrieved") or []]
        # Only what `retrieve` recorded for this run: the ids in state are the authority.
        return [c for c in ctx.result.chunks if (c.chunk_id, c.version) in wanted]

    def _record(
        self,
        ctx: Context,
        ending: RecordedRun,
        question: HumanMessage,
        recalled: Recalled,
        prompt_sha: str,
        chunks: list[QuotedChunk],
        history: list[Any],
    ) -> str:
        """Return the run record: how it ended, and what the model was given, by id (agent/record.py)."""
        window = recalled.window
        return replace(
            ending,
            input_id=str(question.id),
            system_prompt_sha256=prompt_sha,
            window=window_by_ids(window, history[-WINDOW_HISTORY:]),
            shortened=shortened_parts(window),
            retrieved=chunk_versions(chunks),
            recalled=recalled.ids,
            settings={
                "context_tokens": self.settings.context_tokens,
                "summary_after_turns": self.settings.summary_after_turns,
                "window_history": WINDOW_HISTORY,
                "fold_batch": FOLD_BATCH,
                "tokenizer": self.counter.name,
                "language": ctx.language,
            },
        ).dump()

    async def write_memory(self, state: ConversationState, runtime: Runtime[Context]) -> ConversationState:
        """Hand the answered turn to the memory writer, which records it durably and works after the answer.

        The job's row is written before `end` is sent (the run service awaits the hand-off,
        `Context.handoffs`, beside the final checkpoint write): once the caller has the
        answer, its memory work survives the replica (memory/jobs.py).
        """
        ctx = runtime.context
        question = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
        handed = self.deps.memory_sink(
            MemoryJob(
                tenant_id=ctx.tenant_id,
                user_id=ctx.user_id,
                thread_id=ctx.thread_id,
                run_id=ctx.run_id,
                locale=ctx.locale,
                user_text=str(question.text),
                offline_candidates=ctx.result.memory_candidates,
                ended=ctx.ended,
            )
        )
        if handed is None:
            return ConversationState()
        if ctx.handoffs is None:
            await handed
        else:
            ctx.handoffs.append(asyncio.ensure_future(handed))
        return ConversationState()

    async def _window_and_summary(
        self,
        state: ConversationState,
        history: list[Any],
        question: HumanMessage,
        chunks: list[QuotedChunk],
        turns: int,
        ctx: Context,
    ) -> tuple[TurnWindowParts, Window, ConversationState]:
        """Build the model window, folding what left it into the summary when a batch is due."""
        summary = state.get("summary", "")
        parts = TurnWindowParts(state, history, question, summary, chunks, ctx.language)
        window = self._window(parts)
        start, end = self._fold_range(history, state.get("summarized_through"), window)
        # Folded a batch at a time, whatever the turn count: turns leave the window by its
        # token budget long before the recent list is full when answers are long, and a
        # window must not lose the conversation's beginning (docs/api.md). One summariser
        # call (and one window rebuild) per FOLD_BATCH messages, at most four turns behind.
        if end - start < FOLD_BATCH:
            return parts, window, ConversationState()
        try:
            folded = await self._fold(summary, history[start:end], ctx)
        except BudgetExhausted:
            # Skipped, not failed: the same messages are folded on a later turn that fits.
            metrics.SUMMARY_FOLDS.labels("over_budget").inc()
            return parts, window, ConversationState()
        metrics.SUMMARY_FOLDS.labels("ok" if folded != summary else "unchanged").inc()
        if folded == summary:  # a failed fold keeps the old summary; a later turn retries
            return parts, window, ConversationState()
        parts = replace(parts, summary=folded)
        window = self._window(parts)
        return parts, window, ConversationState(summary=folded, summarized_through=str(history[end - 1].id))

    async def _fold(self, summary: str, dropped: list[Any], ctx: Context) -> str:
        """Fold `dropped` into the summary; with budgets, under a reservation of the fold's worst case."""
        model = self.deps.summariser()
        budgets = self.deps.budgets
        if model is None or budgets is None:
            return await self._fold_call(summary, dropped, ctx, model, None)
        # The fold sends at most these messages (cut shorter) beside the summary and its prompt.
        bound = self.counter.count_messages(dropped) + self.counter.count_text(summary) + _FOLD_OVERHEAD_TOKENS
        async with budgets.held(
            ctx.tenant_id, ctx.user_id, kind="summary", models=[model.spec], input_tokens=bound, sized=True
        ) as held:
            # Sent with the output the hold leaves it, not the whole cap.
            capped = ChainEntry(model.spec, with_output_cap(model.model, held.output_tokens))
            return await self._fold_call(summary, dropped, ctx, capped, held)

    async def _fold_call(
        self, summary: str, dropped: list[Any], ctx: Context, model: ChainEntry | None, held: Held | None
    ) -> str:
        def used(call: ModelCallUsage) -> None:
            self._usage(ctx).append(call)
            if held is not None:
                held.used(call)

        return await fold_summary(
            summary, dropped, ctx.language, model, timeout=self.settings.summary_timeout_seconds, on_usage=used
        )

    @staticmethod
    def _fold_range(history: list[Any], summarized_through: str | None, window: Window) -> tuple[int, int]:
        """Return [start, end) of the history messages that left the window unsummarised."""
        end = max(0, len(history) - WINDOW_HISTORY) + window.first_kept
        start = 0
        if summarized_through:
            for index in range(len(history) - 1, -1, -1):
                if history[index].id == summarized_through:
                    start = index + 1
                    break
            # Not found: it has left the recent list, so everything in it is newer.
        return messages_to_fold(len(history), start, end)

    async def _recall(self, parts: TurnWindowParts, window: Window, ctx: Context, writer: IndexWriter) -> Recalled:
        """Add the thread's earlier turns the question needs to the window, when it left some out (agent/_recall.py).

        Recall's index writes pass the run's fence (`writer`), as its checkpoint writes do.
        """
        if self.deps.recall is None:
            return Recalled(window)
        history = parts.history
        ask = RecallAsk(
            ctx.thread_id,
            writer,
            history,
            # The recent list holds the whole thread until it first fills up.
            whole=len(parts.state["messages"]) < RECENT_MESSAGES and len(history) <= WINDOW_HISTORY,
            question=parts.question,
            language=ctx.language,
        )
        return await RecallStep(self.deps.recall, self.settings, self.counter).into(window, ask)

    def _window(self, parts: TurnWindowParts) -> Window:
        state = parts.state
        inputs = WindowInputs(
            system_prompt=system_prompt(parts.language),
            profile=state.get("profile") or {},
            facts=state.get("facts") or [],
            summary=parts.summary,
            chunks=parts.chunks,
            # Never the oldest messages of the recent list: they are folded into the summary
            # before the list drops them (see state.py).
            history=parts.history[-WINDOW_HISTORY:],
            question=parts.question,
        )
        window = build_window(inputs, budget=self.settings.context_tokens, counter=self.counter)
        if window.chunks_shortened:
            metrics.WINDOW_SHORTENED.labels("chunks").inc()
        if window.question_shortened:
            metrics.WINDOW_SHORTENED.labels("question").inc()
        return window

    async def _stream_offline(self, content: str, emit: EventSink) -> None:
        delay = self.settings.offline_token_delay_ms / 1000
        for piece in split_tokens(content):
            emit(Token(piece))
            if delay:
                await asyncio.sleep(delay)

    async def _ask_model(self, window: Window, chunks: list[QuotedChunk], ctx: Context) -> ModelAnswer:
        emit = _events(ctx)
        return await ask_model(
            self.deps.answer_chain(),
            window.messages,
            known_chunk_ids={c.chunk_id for c in chunks},
            language=ctx.language,
            limits=TimeLimits.of(self.settings),
            on_delta=lambda delta: emit(Token(delta)),
            on_cancelled=self._usage(ctx).append,
            size=ctx.size_answer,
        )


def _events(ctx: Context) -> EventSink:
    """Return where this run's events go: the caller's sink, else the graph's custom stream."""
    return ctx.events if ctx.events is not None else custom_stream_sink(get_stream_writer())


def _memory_request(candidates: MemoryCandidates) -> MemoryRequest | None:
    """Return what a "remember …" in the message asks of memory, as the offline responder answers it."""
    return "refused" if candidates.rejected else "noted" if candidates.facts else None


@dataclass(frozen=True, slots=True)
class TurnWindowParts:
    """What one turn's model window is built from, beside the token budget (`Nodes._window`)."""

    state: ConversationState
    history: list[Any]
    question: HumanMessage
    summary: str
    chunks: list[QuotedChunk]
    language: str
