"""Runs: one user message = one graph execution, streamed as events.

A run executes in a task of its own, not in the request: a client that disconnects
mid-stream does not cancel it, so the turn either completes and persists or (on a crash)
leaves the thread as the last completed run left it, plus the user's message. Events go
through a queue that the SSE response (or the JSON waiter) reads.

Checkpoint writes per run: two. The user's message is written first, on its own, as the
output of START (durable before the `metadata` event goes out); the graph then runs with
durability "exit" and writes one checkpoint at the end (4 rows instead of ~20 with
"async"; see docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import START
from langgraph.graph.state import CompiledStateGraph
from psycopg_pool import PoolTimeout

from chatbot import metrics
from chatbot.agent.context import Context
from chatbot.agent.modelcall import ModelFailure, ModelTimeout
from chatbot.agent.state import META_KEY, now_rfc3339, text_of, user_turn
from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.errors import Problem, problem_body
from chatbot.threads.locks import Lease, Locks
from chatbot.threads.ownership import check_thread_access
from chatbot.threads.ratelimit import RateLimiter

log = logging.getLogger("chatbot.runs")

DATABASE_ERRORS = (psycopg.OperationalError, PoolTimeout)


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run's stream."""

    event: str
    data: dict[str, Any]


@dataclass(slots=True)
class Run:
    """A started run: its ids, its event queue and its task."""

    run_id: str
    thread_id: str
    events: asyncio.Queue[RunEvent] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None

    async def stream(self) -> AsyncIterator[list[RunEvent]]:
        """Yield events in batches (whatever is queued), ending after `end` or `error`."""
        while True:
            batch = [await self.events.get()]
            while not self.events.empty():
                batch.append(self.events.get_nowait())
            yield batch
            if batch[-1].event in ("end", "error"):
                return

    async def result(self) -> RunEvent:
        """Wait for the run and return its `end` or `error` event."""
        async for batch in self.stream():
            last = batch[-1]
            if last.event in ("end", "error"):
                return last
        raise RuntimeError("run stream ended without a terminal event")


def _failure(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, ModelTimeout | TimeoutError):
        return 504, "the model did not answer in time"
    if isinstance(exc, ModelFailure):
        return 502, "the model failed to answer"
    if isinstance(exc, DATABASE_ERRORS):
        return 503, "the database is unavailable"
    return 500, "the run failed"


class RunService:
    """Start runs on threads, one at a time per thread, across every replica."""

    def __init__(
        self, *, pool: Pool, locks: Locks, graph: CompiledStateGraph[Any, Any, Any, Any], limiter: RateLimiter
    ) -> None:
        self.pool = pool
        self.locks = locks
        self.graph = graph
        self.limiter = limiter
        self._active: set[asyncio.Task[None]] = set()

    async def start(self, thread_id: str, caller: CallerContext, content: str) -> Run:
        """Check access, limits and the thread lock; persist the message; start the run."""
        try:
            await check_thread_access(self.pool, thread_id, caller, must_exist=False)
            retry = await self.limiter.retry_after(caller)
            if retry is not None:
                raise _rate_limited(retry)
            lease = await self.locks.try_thread(thread_id)
        except DATABASE_ERRORS:
            raise Problem(503, "the database is unavailable") from None
        if lease is None:
            metrics.RUNS_REJECTED.labels("in_flight").inc()
            raise Problem(409, "a run is already in flight on this thread")
        try:
            retry = await self.limiter.consume(caller)
            if retry is not None:
                raise _rate_limited(retry)
            run = Run(run_id=str(uuid.uuid4()), thread_id=thread_id)
            config = self._config(run, caller)
            message = HumanMessage(
                content=content,
                id=str(uuid.uuid4()),
                additional_kwargs={META_KEY: {"created_at": now_rfc3339(), "run_id": run.run_id}},
            )
            await self.graph.aupdate_state(config, user_turn(message), as_node=START)
        except BaseException as exc:
            await lease.release()
            if isinstance(exc, DATABASE_ERRORS):
                raise Problem(503, "the database is unavailable") from None
            raise
        run.events.put_nowait(RunEvent("metadata", {"run_id": run.run_id, "thread_id": thread_id}))
        task = asyncio.create_task(self._execute(run, caller, lease, config), name=f"run-{run.run_id}")
        run.task = task
        self._active.add(task)
        task.add_done_callback(self._active.discard)
        return run

    def _config(self, run: Run, caller: CallerContext) -> RunnableConfig:
        # Identity goes to checkpoint metadata (the record of who wrote the turn), never to state.
        return {
            "configurable": {"thread_id": run.thread_id},
            "metadata": {"tenant_id": caller.tenant_id, "user_id": caller.user_id, "run_id": run.run_id},
        }

    async def _execute(self, run: Run, caller: CallerContext, lease: Lease, config: RunnableConfig) -> None:
        started = time.perf_counter()
        first_token: float | None = None
        terminal: RunEvent | None = None
        status = "error"
        context = Context(
            tenant_id=caller.tenant_id,
            user_id=caller.user_id,
            locale=caller.locale,
            run_id=run.run_id,
            thread_id=run.thread_id,
        )
        try:
            outcome: dict[str, Any] = {}
            content = ""
            stream = self.graph.astream(
                None, config, context=context, stream_mode=["custom", "updates"], durability="exit"
            )
            async for mode, chunk in cast(AsyncIterator[tuple[str, dict[str, Any]]], stream):
                if mode == "custom":
                    if first_token is None and chunk["event"] == "token":
                        first_token = time.perf_counter()
                    run.events.put_nowait(RunEvent(chunk["event"], chunk["data"]))
                elif "generate" in chunk:
                    outcome = chunk["generate"]["outcome"]
                    content = text_of(chunk["generate"]["messages"][0])
            status = outcome["status"]
            terminal = RunEvent(
                "end",
                {
                    "run_id": run.run_id,
                    "thread_id": run.thread_id,
                    "status": status,
                    "message": {"id": outcome["message_id"], "content": content},
                    "citations": outcome.get("citations", []),
                    "handoff_context": outcome.get("handoff_context"),
                },
            )
        except BaseException as exc:
            code, detail = _failure(exc)
            terminal = RunEvent("error", problem_body(code, detail))
            if not isinstance(exc, Exception):  # cancelled: shutdown went past its grace period
                raise
            log.warning(
                "run failed", extra={"thread_id": run.thread_id, "run_id": run.run_id, "error": type(exc).__name__}
            )
        finally:
            # Release before `end` goes out: a follow-up sent right after `end` must be accepted.
            await lease.release()
            if terminal is not None:
                run.events.put_nowait(terminal)
            metrics.RUNS.labels(status).inc()
            elapsed = time.perf_counter() - started
            metrics.RUN_SECONDS.observe(elapsed)
            log.info(
                "run finished",
                extra={
                    "thread_id": run.thread_id,
                    "run_id": run.run_id,
                    "tenant_id": caller.tenant_id,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 1),
                    "ttft_ms": None if first_token is None else round((first_token - started) * 1000, 1),
                },
            )

    async def drain(self, timeout: float) -> None:
        """Let in-flight runs finish (graceful shutdown); cancel what is left after `timeout`."""
        if not self._active:
            return
        _, pending = await asyncio.wait(set(self._active), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)


def _rate_limited(retry: int) -> Problem:
    metrics.RUNS_REJECTED.labels("rate_limited").inc()
    return Problem(429, "rate limit exceeded", headers={"Retry-After": str(retry)})
