"""Runs: one user message = one graph execution, streamed as events.

A run executes in a task of its own, not in the request: a client that disconnects
mid-stream does not cancel it, so the turn either completes and persists or (on a crash)
leaves the thread as the last completed run left it, plus the user's message. Events go
to a `RunStream` (threads/_stream.py) that the SSE response, a rejoin or the JSON waiter
listen to. Each run executing here is one `InFlight` record (threads/_inflight.py), from
its start to its task's end: `_execute` returns what ended the run, and named steps
finish it, in an order callers rely on.

A run in flight holds no connection: its thread lock is one of many on the replica's
shared lock sessions (db/locks.py), and the checkpointer and store borrow pool
connections only for their statements. Every checkpoint write of the run is fenced by
its lease (db/saver.py): a run whose lock session dropped and whose thread another
holder took fails with 503 instead of writing.

A run can be stopped from any replica (`cancel`, threads/cancel.py): Postgres decides
between the cancel and the run's own end on the thread's fence row, and the replica running
it cancels the task that runs its graph, records what was shown and frees the thread.

Checkpoint writes per run: two. The user's message is written first, on its own, as the
output of START (durable before the `metadata` event goes out); the graph then runs with
durability "exit" and writes one checkpoint at the end (4 rows instead of ~20 with
"async"; see docs/measurements/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import START
from langgraph.graph.state import CompiledStateGraph

from chatbot import metrics
from chatbot.agent.context import Context
from chatbot.agent.early import EarlyReads
from chatbot.agent.modelcall import answer_input_floor
from chatbot.agent.result import RunResult
from chatbot.agent.run import run_graph
from chatbot.agent.state import user_turn
from chatbot.budgets.service import BudgetExhausted, Budgets, Reservation, budget_member, budget_refusal_detail
from chatbot.caller import CallerContext
from chatbot.db import usage_totals
from chatbot.db.joined_writes import writes_join_next_checkpoint
from chatbot.db.locks import LeaseLost, Locks, OwnedByAnother, UserErasing
from chatbot.db.pool import Pool
from chatbot.db.saver import fenced
from chatbot.errors import DATABASE_ERRORS, Problem, database_problem
from chatbot.failures import Failure
from chatbot.ids import RunId, TenantId, ThreadId
from chatbot.threads import cancel
from chatbot.threads._cancelled_run import record_cancelled, stopped_by_user
from chatbot.threads._inflight import UNKNOWN_ENDING, InFlight, RunEnding, RunSink, report_end
from chatbot.threads._ownership import Owner, check_owner, check_thread_access, thread_not_found
from chatbot.threads._stream import Listener, RunStream
from chatbot.threads.deletion import forget_unwritten_thread
from chatbot.threads.ratelimit import RateLimiter
from chatbot.timestamps import now_rfc3339
from chatbot.tracing.service import NO_TRACING, Tracing
from chatbot.turns import META_KEY

log = logging.getLogger("chatbot.runs")

Settlement = tuple[Reservation, Sequence[usage_totals.Call]]
"""A budget reservation and the calls it settles to."""

# What a refused run is told to wait: runs of a busy replica end within seconds.
BUSY_RETRY_AFTER_SECONDS = 2


@dataclass(kw_only=True, eq=False)
class RunService:
    """Start runs on threads, one at a time per thread, across every replica."""

    pool: Pool
    locks: Locks
    graph: CompiledStateGraph[Any, Any, Any, Any]
    limiter: RateLimiter
    max_in_flight: int = 1000
    tracing: Tracing = NO_TRACING
    model: str | None = None
    """The configured model, named in a cancelled run's record."""
    budgets: Budgets | None = None
    """Spending caps checked before the answer call (budgets/); None: no check at all."""
    answer_models: tuple[str, ...] = ()
    """The answer chain's `provider:model` specs: a run's early hold is priced at the dearest."""
    context_tokens: int = 6000
    """The window's budget (CHATBOT_CONTEXT_TOKENS): a question longer is cut to fit it."""
    early_reads: Callable[[CallerContext, str], EarlyReads] | None = None
    """Starts a run's memory read and knowledge search beside its input's write (agent/early.py)."""
    _starting: int = field(default=0, init=False)
    _runs: dict[RunId, InFlight] = field(default_factory=dict, init=False)
    """The runs executing on this replica, by run id, until their task is done."""

    @property
    def in_flight(self) -> int:
        """Return the runs this replica is starting or executing."""
        return self._starting + len(self._runs)

    def local(self, thread_id: ThreadId, run_id: RunId) -> RunStream | None:
        """Return the stream of a run executing on this replica, if it is one (and still holds its thread)."""
        run = self._runs.get(run_id)
        return run.stream if run is not None and run.joinable and run.thread_id == thread_id else None

    async def cancel(self, thread_id: ThreadId, run_id: RunId, *, wait: float = 1.0) -> bool:
        """Cancel a run in flight on any replica; return False when it had already ended.

        The decision is Postgres's (threads/cancel.py). A run of this replica is stopped at
        once; for one elsewhere its replica is notified. Either way this waits (up to `wait`
        seconds) until the thread is free, so a new run sent after the answer is accepted.
        """
        try:
            if not await cancel.request_cancel(self.pool, self.locks, thread_id, run_id):
                return False
        except DATABASE_ERRORS:
            raise database_problem() from None
        # Decided: from here on the answer is 202 whatever happens while waiting.
        self.cancel_local(thread_id, run_id)
        run = self._runs.get(run_id)
        if run is not None:
            await asyncio.wait({run.task}, timeout=wait)
            return True
        deadline = asyncio.get_running_loop().time() + wait
        with contextlib.suppress(*DATABASE_ERRORS):
            while asyncio.get_running_loop().time() < deadline:
                if await cancel.thread_free(self.pool, self.locks, thread_id):
                    break
                await asyncio.sleep(0.02)
        return True

    def cancel_local(self, thread_id: ThreadId, run_id: RunId) -> None:
        """Stop the graph of a run executing here (a cancel was decided); ignore other runs."""
        run = self._runs.get(run_id)
        if run is not None and run.thread_id == thread_id:
            run.stop()

    async def start(
        self, thread_id: ThreadId, caller: CallerContext, content: str, trace_parent: Mapping[str, str] | None = None
    ) -> Listener:
        """Check capacity, access, limits and the thread lock; persist the message; start the run.

        Return the listener of the caller that started it: every event from `metadata` on.
        `trace_parent` is the request's W3C trace context (tracing/__init__.py).
        """
        if self.in_flight >= self.max_in_flight:
            # Refused before anything is read or written: a burst past capacity must not
            # slow down every run already in flight.
            metrics.RUNS_REJECTED.labels("busy").inc()
            raise Problem(
                503, "too many runs in flight on this replica", headers={"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)}
            )
        self._starting += 1
        try:
            return await self._start(thread_id, caller, content, trace_parent)
        finally:
            self._starting -= 1

    async def _start(
        self, thread_id: ThreadId, caller: CallerContext, content: str, trace_parent: Mapping[str, str] | None
    ) -> Listener:
        # The owner is decided before the lock, in the lock's own statement: another caller's
        # request is refused (404) without touching the thread's lock, so requests that are
        # refused anyway cannot make the owner's own runs meet a 409. A run that gets the
        # lock checks its owner again under it: another caller's first run on a new thread
        # id may have created the thread since.
        erasing = False
        try:
            try:
                lease = await self.locks.try_run(thread_id, caller.tenant_id, caller.user_id)
            except UserErasing:
                lease, erasing = None, True
            except OwnedByAnother:
                raise thread_not_found() from None
            if lease is None:
                # Refused, perhaps before the owner was read (a run of this replica holds the
                # thread, or the user is being erased here): another caller's thread is a 404.
                await check_thread_access(self.pool, thread_id, caller, must_exist=False)
                retry = await self.limiter.retry_after(caller)
        except DATABASE_ERRORS:
            raise database_problem() from None
        if lease is None:
            if retry is not None:
                raise _rate_limited(retry)
            if erasing:
                metrics.RUNS_REJECTED.labels("erasing").inc()
                raise Problem(409, "this user is being erased; nothing can be started until the erasure is done")
            metrics.RUNS_REJECTED.labels("in_flight").inc()
            raise Problem(409, "a run is already in flight on this thread")
        fresh = False  # no checkpoint of the thread yet, as read under the lock
        reservation: Reservation | None = None
        early = None
        try:
            # Decided under the lock: another caller's first run on this thread id may have
            # created the thread a moment ago (the owner is the first checkpoint's caller,
            # read in the statement that set the lease's fence).
            owner = None if lease.owner is None else Owner(*lease.owner)
            fresh = not check_owner(owner, caller, must_exist=False)
            # The answer's early hold, before anything is written: a run that cannot afford
            # even that is refused like a rate-limited one, before its stream starts.
            reservation = await self._reserve_answer(caller, content)
            retry = await self.limiter.consume(caller)
            if retry is not None:
                raise _rate_limited(retry)
            stream = RunStream(RunId(str(uuid.uuid4())), thread_id)
            assert lease.fence is not None
            config = fenced(self._config(stream, caller), lease.fence)
            message = HumanMessage(
                content=content,
                id=str(uuid.uuid4()),
                additional_kwargs={META_KEY: {"created_at": now_rfc3339(), "run_id": stream.run_id}},
            )
            # Under way beside the input's write and the graph's state load, which they do not need.
            early = self.early_reads(caller, content) if self.early_reads is not None else None
            # The input task's writes and the checkpoint applying them: one transaction, one round trip.
            async with writes_join_next_checkpoint():
                await self.graph.aupdate_state(config, user_turn(message), as_node=START)
        except BaseException as exc:
            if early is not None:
                early.cancel()
            if fresh and isinstance(exc, Problem):
                # A first run refused before it wrote anything (429): the fence row its lock
                # set would be all that is left of the thread id, and nothing deletes rows of
                # a thread without checkpoints. Deleted while the lock is still held.
                await forget_unwritten_thread(self.pool, lease.fence)
            await lease.release()
            if self.budgets is not None:
                await self.budgets.release(reservation)
            if isinstance(exc, (*DATABASE_ERRORS, LeaseLost)):
                raise database_problem() from None
            raise
        run = InFlight(
            stream=stream,
            caller=caller,
            lease=lease,
            config=config,
            input_id=str(message.id),
            trace_parent=trace_parent,
            reservation=reservation,
            early=early,
        )
        self._runs[run.run_id] = run
        listener = stream.listen(from_start=True)
        run.task = asyncio.create_task(self._run(run), name=f"run-{run.run_id}")
        metrics.RUNS_IN_FLIGHT.inc()
        run.task.add_done_callback(lambda _: self._run_done(run))
        return listener

    async def _reserve_answer(self, caller: CallerContext, content: str) -> Reservation | None:
        """Hold the answer's early share against the caller's budgets, or refuse the run (429).

        The call itself is sized at the model step (`Budgets.size`), once its window is counted.
        """
        if self.budgets is None or not self.answer_models:
            return None  # no check, or the offline model: it costs nothing
        floor = answer_input_floor(self.answer_models[0], content, caller.language, self.context_tokens)
        try:
            return await self.budgets.admit(caller.tenant_id, caller.user_id, self.answer_models, input_floor=floor)
        except BudgetExhausted as exc:
            metrics.RUNS_REJECTED.labels(exc.reason).inc()
            raise Problem(
                429,
                budget_refusal_detail(exc),
                headers={"Retry-After": str(exc.retry_after)},
                members={"reason": exc.reason, "budget": budget_member(exc)},
            ) from None

    def _config(self, stream: RunStream, caller: CallerContext) -> RunnableConfig:
        # Identity goes to checkpoint metadata (the record of who wrote the turn), never to state.
        return {
            "configurable": {"thread_id": stream.thread_id},
            "metadata": {"tenant_id": caller.tenant_id, "user_id": caller.user_id, "run_id": stream.run_id},
        }

    async def _run(self, run: InFlight) -> None:
        """The run's task: its graph, then the named steps that finish it, in their order."""
        sink = RunSink(run.stream, time.perf_counter())
        context = self._context(run, sink)
        trace = self.tracing.start_run(
            thread_id=run.thread_id, run_id=run.run_id, tenant_id=run.caller.tenant_id, parent=run.trace_parent
        )
        traced = trace.configure(run.config)
        ending = UNKNOWN_ENDING
        try:
            ending = await self._execute(run, traced, context)
            if ending.escaping is not None:  # cancelled: shutdown went past its grace period
                raise ending.escaping
        finally:
            # The order is what callers see: each step says why it comes where it does.
            run.graph_over()
            run.stop_early_reads()
            if ending.by_user:
                # Under the lock still: a rejoin that sees the thread free finds the record.
                await record_cancelled(self.graph, self.pool, self.model, run, context.result)
            await run.handoffs_written()
            await run.free_thread()
            await self._settle(run, ending, context.result)
            run.publish_end(ending)
            report_end(run, ending, sink, trace)

    def _context(self, run: InFlight, sink: RunSink) -> Context:
        """Return what the graph's nodes know of the run: who asks, where its events go, what it holds."""
        return Context(
            tenant_id=run.caller.tenant_id,
            user_id=run.caller.user_id,
            locale=run.caller.locale,
            run_id=run.run_id,
            thread_id=run.thread_id,
            events=sink,
            handoffs=run.handoffs,
            ended=run.ended,
            size_answer=None if self.budgets is None else self.budgets.sizer(run.reservation),
            early=run.early,
        )

    async def _execute(self, run: InFlight, config: RunnableConfig, context: Context) -> RunEnding:
        """Run the graph; return what ended the run (a shutdown's cancellation too, for the task to raise)."""
        result = await run_graph(self.graph, None, config, context, durability="exit")
        run.graph_over()  # over: a cancel can no longer cancel it
        exc = result.raised
        if exc is None:
            outcome = result.outcome
            assert outcome is not None  # run_graph says why when there is none
            if outcome.failure is not None:
                # The model failed and the graph recorded it (agent/nodes.py): a typed outcome.
                return RunEnding(terminal=outcome.failure, error=result.model_failure)
            return RunEnding(status=outcome.status, terminal=outcome)
        if await stopped_by_user(self.pool, run, exc):
            return RunEnding(status="cancelled", terminal=Failure("cancelled"), by_user=True)
        return RunEnding(terminal=result.failure, error=exc)

    async def _settle(self, run: InFlight, ending: RunEnding, result: RunResult) -> None:
        """Add the run's usage to its tenant's totals and settle the answer's hold; then tell its memory job.

        Before the terminal event: `chatbot usage` read right after `end` includes this run.
        The memory job (waiting on `ended`) is then checked against what the answer spent,
        not against its hold.
        """
        try:
            # The answer's budget reservation settles in the same round trip as the totals.
            settle = self._answer_settlement(run.reservation, result)
            await self._add_usage(run.caller.tenant_id, result.usage, settle)
        finally:
            run.ended.set_result("answered" if ending.status == "answered" else "other")

    def _run_done(self, run: InFlight) -> None:
        self._runs.pop(run.run_id, None)
        metrics.RUNS_IN_FLIGHT.dec()

    async def _add_usage(self, tenant_id: TenantId, calls: list[Any], settle: Settlement | None = None) -> None:
        """Add the run's model calls to the tenant's daily totals (they outlive the thread).

        With `settle`, the answer's budget reservation is settled on the same connection,
        pipelined: one round trip for both.
        """
        calls = [call for call in calls if call.model != "offline"]
        if not calls and settle is None:
            return  # the offline model costs nothing: no statement per offline run
        try:
            async with self.pool.connection() as conn, conn.pipeline():
                if calls:
                    await usage_totals.add(conn, tenant_id, calls)
                if settle is not None and self.budgets is not None:
                    await self.budgets.settle_on(conn, *settle)
        except Exception as exc:  # whatever the counts or the database do, the run's end goes out
            log.warning("usage totals not written", extra={"tenant_id": tenant_id, "error": type(exc).__name__})

    @staticmethod
    def _answer_settlement(reservation: Reservation | None, result: RunResult) -> Settlement | None:
        """Return the answer's reservation and what its calls used.

        A failed call settles to what it reported; a cancelled one to what agent/modelcall.py
        counted for it (its window and the text streamed, unless the provider had reported).
        """
        if reservation is None:
            return None
        return reservation, [call for call in result.usage if call.kind == "answer"]

    async def drain(self, timeout: float) -> None:
        """Let in-flight runs finish (graceful shutdown); cancel what is left after `timeout`."""
        if not self._runs:
            return
        _, pending = await asyncio.wait({run.task for run in self._runs.values()}, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)


def _rate_limited(retry: int) -> Problem:
    metrics.RUNS_REJECTED.labels("rate_limited").inc()
    return Problem(429, "rate limit exceeded", headers={"Retry-After": str(retry)})
