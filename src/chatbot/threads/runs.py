"""Runs: one user message = one graph execution, streamed as events.

A run executes in a task of its own, not in the request: a client that disconnects
mid-stream does not cancel it, so the turn either completes and persists or (on a crash)
leaves the thread as the last completed run left it, plus the user's message. Events go
to a `RunStream` (threads/_stream.py) that the SSE response, a rejoin or the JSON waiter
listen to.

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
from typing import Any, cast

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import START
from langgraph.graph.state import CompiledStateGraph

from chatbot import metrics
from chatbot.agent.context import Context, RunEnded
from chatbot.agent.early import EarlyReads
from chatbot.agent.modelcall import answer_input_floor
from chatbot.agent.outcome import GraphEvent, GraphOutcome, Token
from chatbot.agent.record import chunk_versions
from chatbot.agent.result import RunResult
from chatbot.agent.run import run_graph
from chatbot.agent.state import user_turn
from chatbot.budgets.service import BudgetExhausted, Budgets, Reservation, budget_member, budget_refusal_detail
from chatbot.caller import CallerContext
from chatbot.db import usage_totals
from chatbot.db.joined_writes import writes_join_next_checkpoint
from chatbot.db.locks import Fence, Lease, LeaseLost, Locks, OwnedByAnother, UserErasing
from chatbot.db.pool import Pool
from chatbot.db.run_record import RecordedRun
from chatbot.db.saver import fenced
from chatbot.errors import DATABASE_ERRORS, Problem, database_problem
from chatbot.failures import Failure
from chatbot.ids import RunId, TenantId, ThreadId
from chatbot.threads import cancel
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
# Pauses between attempts at a cancelled run's record (about 6 s in all, the lock held).
_RECORD_RETRY_SECONDS = (0.1, 0.3, 0.6, 1.0, 2.0, 2.0)


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
    _runs: dict[str, RunStream] = field(default_factory=dict, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _graphs: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    """Runs whose graph is still executing, by run id: a cancel may still cancel their task."""
    _cancelled: set[str] = field(default_factory=set, init=False)

    @property
    def in_flight(self) -> int:
        """Return the runs this replica is starting or executing."""
        return self._starting + len(self._tasks)

    def local(self, thread_id: ThreadId, run_id: RunId) -> RunStream | None:
        """Return the stream of a run executing on this replica, if it is one."""
        stream = self._runs.get(run_id)
        return stream if stream is not None and stream.thread_id == thread_id else None

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
        task = self._tasks_of(run_id)
        if task is not None:
            await asyncio.wait({task}, timeout=wait)
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
        stream = self._runs.get(run_id)
        task = self._graphs.get(run_id)
        if stream is None or stream.thread_id != thread_id or task is None or run_id in self._cancelled:
            # Not here, past its graph (its refused final write tells it), or told already:
            # the replica's own listener hears the cancel this replica decided, too.
            return
        self._cancelled.add(run_id)
        # Cancels the provider's stream too: its HTTP response is closed on the way out.
        task.cancel()

    def _tasks_of(self, run_id: RunId) -> asyncio.Task[None] | None:
        return next((t for t in self._tasks if t.get_name() == f"run-{run_id}"), None)

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
        self._runs[stream.run_id] = stream
        listener = stream.listen(from_start=True)
        task = asyncio.create_task(
            self._execute(stream, caller, lease, config, str(message.id), trace_parent, reservation, early),
            name=f"run-{stream.run_id}",
        )
        self._graphs[stream.run_id] = task
        self._tasks.add(task)
        metrics.RUNS_IN_FLIGHT.inc()
        task.add_done_callback(self._run_done)
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

    async def _execute(
        self,
        stream: RunStream,
        caller: CallerContext,
        lease: Lease,
        config: RunnableConfig,
        input_id: str,
        trace_parent: Mapping[str, str] | None = None,
        reservation: Reservation | None = None,
        early: EarlyReads | None = None,
    ) -> None:
        started = time.perf_counter()
        sink = _RunSink(stream, started)
        terminal: GraphOutcome | Failure | None = None
        status = "error"
        # How the run ended, for its memory job (memory/jobs.py), and what its nodes handed off.
        ended: RunEnded = asyncio.get_running_loop().create_future()
        handoffs: list[asyncio.Future[None]] = []
        context = Context(
            tenant_id=caller.tenant_id,
            user_id=caller.user_id,
            locale=caller.locale,
            run_id=stream.run_id,
            thread_id=stream.thread_id,
            events=sink,
            handoffs=handoffs,
            ended=ended,
            size_answer=None if self.budgets is None else self.budgets.sizer(reservation),
            early=early,
        )
        failure: BaseException | None = None
        trace = self.tracing.start_run(
            thread_id=stream.thread_id, run_id=stream.run_id, tenant_id=caller.tenant_id, parent=trace_parent
        )
        traced = trace.configure(config)
        user_cancelled = False
        result = context.result
        try:
            await run_graph(self.graph, None, traced, context, durability="exit")
            self._graphs.pop(stream.run_id, None)  # over: a cancel can no longer cancel it
            exc = result.raised
            if exc is None:
                outcome = result.outcome
                assert outcome is not None  # run_graph says why when there is none
                if outcome.failure is not None:
                    # The model failed and the graph recorded it (agent/nodes.py): a typed outcome.
                    failure = result.model_failure
                    terminal = outcome.failure
                else:
                    status = outcome.status
                    terminal = outcome
            else:
                user_cancelled = await self._cancelled_by_user(stream, lease, exc)
                if user_cancelled:
                    status = "cancelled"
                    terminal = Failure("cancelled")
                else:
                    terminal = result.failure
                    failure = exc
                    if not isinstance(exc, Exception):  # cancelled: shutdown went past its grace period
                        raise exc
        finally:
            self._graphs.pop(stream.run_id, None)
            self._cancelled.discard(stream.run_id)
            if early is not None:
                early.cancel()  # used by now, or never will be
            if user_cancelled:
                # Under the lock still: a rejoin that sees the thread free finds the record.
                await self._record_cancelled(stream, context, config, lease, input_id)
            if handoffs:
                # The memory job's row, written beside the final checkpoint: durable before `end`.
                await asyncio.wait(handoffs)
            # Release before `end` goes out: a follow-up sent right after `end` must be accepted.
            await lease.release()
            self._runs.pop(stream.run_id, None)
            try:
                # Before the terminal event: `chatbot usage` read right after `end` includes this run.
                # The answer's budget reservation settles in the same round trip as the totals.
                settle = self._answer_settlement(reservation, result)
                await self._add_usage(caller.tenant_id, result.usage, settle)
            finally:
                # After the settlement: the run's memory job (waiting on this) is then checked
                # against what the answer spent, not against its hold.
                ended.set_result("answered" if status == "answered" else "other")
            metrics.RUNS.labels(status).inc()
            if isinstance(terminal, Failure):
                stream.fail(terminal)
            elif terminal is not None:
                stream.end(terminal)
            elapsed = time.perf_counter() - started
            metrics.RUN_SECONDS.observe(elapsed)
            ttft_ms = sink.ttft_ms
            trace.end(status=status, ttft_ms=ttft_ms, error=failure)
            log.log(
                logging.WARNING if failure else logging.INFO,
                "run finished",
                # The chain's types and frames (logs.py), never its messages: they can quote text.
                exc_info=failure,
                extra={
                    "thread_id": stream.thread_id,
                    "run_id": stream.run_id,
                    "tenant_id": caller.tenant_id,
                    "status": status,
                    "error": None if failure is None else type(failure).__name__,
                    "reason": terminal.reason if isinstance(terminal, Failure) else None,
                    "model_error": getattr(failure, "error_class", None),
                    "model_status": getattr(failure, "status", None),
                    "duration_ms": round(elapsed * 1000, 1),
                    "ttft_ms": ttft_ms,
                },
            )

    async def _cancelled_by_user(self, stream: RunStream, lease: Lease, exc: BaseException) -> bool:
        """Return whether the graph stopped (`exc`) because a user's cancel decided so."""
        if stream.run_id in self._cancelled:
            # Stopped by a cancel (threads/cancel.py): the CancelledError it threw in the
            # graph has been delivered; forget it so the awaits after the graph run normally.
            if isinstance(exc, asyncio.CancelledError):
                current = cast(asyncio.Task[None], asyncio.current_task())
                while current.cancelling():
                    current.uncancel()
            return True
        if isinstance(exc, LeaseLost) and lease.fence is not None:
            # The final write was refused: by a cancel whose notice has not come yet?
            with contextlib.suppress(*DATABASE_ERRORS):
                return await cancel.was_cancelled(self.pool, stream.thread_id, lease.fence.token)
        return False

    async def _record_cancelled(
        self, stream: RunStream, context: Context, config: RunnableConfig, lease: Lease, input_id: str
    ) -> None:
        """Write the cancelled run's end: what the user was shown (not in the transcript), no answer.

        Written as the `generate` node's update, under the cancel token the cancel gave the
        thread's fence: only this run's holder can write it, and only after that cancel.
        """
        assert lease.fence is not None
        usage = context.result.usage
        record = RecordedRun(
            stream.run_id,
            status="cancelled",
            reason="cancelled",
            model=self.model,
            answer_id=str(uuid.uuid4()),
            shown=stream.shown,
            input_id=input_id,
            retrieved=chunk_versions(context.result.chunks),
            usage=tuple(call.model_dump() for call in usage),
        ).dump()
        outcome = GraphOutcome("error", failure=Failure("cancelled")).stored()
        token: str | None = cancel.cancel_token(lease.fence.token)
        # Retried (the thread's lock is still held, so nothing else writes it meanwhile): a
        # database that blinks must not lose what the user was shown. A refused write reads
        # which cancel token the fence holds and writes under it; none means another holder
        # took the thread (this run's lock session dropped), and then the thread is not ours.
        for pause in (*_RECORD_RETRY_SECONDS, None):
            if token is None:
                break
            try:
                await asyncio.shield(
                    self.graph.aupdate_state(
                        fenced(config, Fence(stream.thread_id, token)),
                        {"outcome": outcome, "record": record},
                        as_node="generate",
                    )
                )
                return
            except (*DATABASE_ERRORS, LeaseLost) as exc:
                error = type(exc).__name__
                if pause is None:
                    break
            await asyncio.sleep(pause)
            with contextlib.suppress(*DATABASE_ERRORS):
                token = await cancel.record_token(self.pool, stream.thread_id, lease.fence.token)
        log.error(
            "cancelled run's record not written",
            extra={"thread_id": stream.thread_id, "run_id": stream.run_id, "error": error},
        )

    def _run_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
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
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)


class _RunSink:
    """Takes the graph's events on the node's task and publishes them to the run's stream at once."""

    __slots__ = ("first_token", "started", "stream")

    def __init__(self, stream: RunStream, started: float) -> None:
        self.stream = stream
        self.started = started
        self.first_token: float | None = None

    def __call__(self, event: GraphEvent) -> None:
        if self.first_token is None and isinstance(event, Token):
            self.first_token = time.perf_counter()
            metrics.RUN_TTFT_SECONDS.observe(self.first_token - self.started)
        self.stream.publish(event)

    @property
    def ttft_ms(self) -> float | None:
        """Return the time to the first token, in milliseconds, if one was sent."""
        return None if self.first_token is None else round((self.first_token - self.started) * 1000, 1)


def _rate_limited(retry: int) -> Problem:
    metrics.RUNS_REJECTED.labels("rate_limited").inc()
    return Problem(429, "rate limit exceeded", headers={"Retry-After": str(retry)})
