"""A run in flight on this replica: one record per run, from its start to its task's end.

The run service (threads/runs.py) keeps one `InFlight` per run, by run id: the stream a
rejoin listens to, the task a cancel waits for and a drain cancels, what the run was
started with (its lease, its budget hold, its early reads) and how far it has got. One
record, so a run's state cannot disagree with itself, and nothing finds a run by its
task's name. `RunEnding` is what ended a run; `RunSink` takes its graph's events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from langchain_core.runnables import RunnableConfig

from chatbot import metrics
from chatbot.agent.context import RunEnded
from chatbot.agent.early import EarlyReads
from chatbot.agent.outcome import GraphEvent, GraphOutcome, OutcomeStatus, Token
from chatbot.budgets.service import Reservation
from chatbot.caller import CallerContext
from chatbot.db.locks import Lease
from chatbot.failures import Failure
from chatbot.ids import RunId, ThreadId
from chatbot.threads._stream import RunStream
from chatbot.tracing.service import RunTrace

log = logging.getLogger("chatbot.runs")


def _run_ended() -> RunEnded:
    return asyncio.get_running_loop().create_future()


@dataclass(kw_only=True, eq=False)
class InFlight:
    """One run executing on this replica: what it was started with and how far it has got."""

    stream: RunStream
    caller: CallerContext
    lease: Lease
    """The thread's lock, held until the run's end is written (released before `end` goes out)."""
    config: RunnableConfig
    """The graph's config, fenced by the lease (db/saver.py)."""
    input_id: str
    """The id of the user's message, named in a cancelled run's record."""
    trace_parent: Mapping[str, str] | None = None
    """The starting request's W3C trace context: the run's span is its child."""
    reservation: Reservation | None = None
    """The answer's early budget hold, settled at the run's end (None: unchecked)."""
    early: EarlyReads | None = None
    """Its memory read and knowledge search, started beside its input's write (agent/early.py)."""
    ended: RunEnded = field(default_factory=_run_ended)
    """How the run ended, for its memory job (memory/jobs.py): set once the answer's hold is settled."""
    handoffs: list[asyncio.Future[None]] = field(default_factory=list)
    """What its nodes handed off (the memory job's row), awaited before its end goes out."""
    task: asyncio.Task[None] = field(init=False)
    """The task running it: a cancel waits for it, a drain waits for it and then cancels it."""
    graph_running: bool = field(default=True, init=False)
    """Its graph still executes: only then can a cancel stop it (after, its refused write tells it)."""
    stopped_by_cancel: bool = field(default=False, init=False)
    """A user's cancel stopped its graph (threads/cancel.py decided it)."""
    joinable: bool = field(default=True, init=False)
    """Its thread is still held: a rejoin on this replica listens to its stream live."""

    @property
    def run_id(self) -> RunId:
        """Return the run's id."""
        return self.stream.run_id

    @property
    def thread_id(self) -> ThreadId:
        """Return the id of the thread it runs on."""
        return self.stream.thread_id

    def stop(self) -> None:
        """Cancel its graph's task for a user's cancel; nothing once the graph is over or told already."""
        if not self.graph_running or self.stopped_by_cancel:
            # Past its graph (its refused final write tells it), or told already: the replica's
            # own listener hears the cancel this replica decided, too.
            return
        self.stopped_by_cancel = True
        # Cancels the provider's stream too: its HTTP response is closed on the way out.
        self.task.cancel()

    def graph_over(self) -> None:
        """Mark its graph as over: a cancel can no longer cancel it."""
        self.graph_running = False

    def stop_early_reads(self) -> None:
        """Cancel its early memory read and knowledge search: used by now, or never will be."""
        if self.early is not None:
            self.early.cancel()

    async def handoffs_written(self) -> None:
        """Wait for what its nodes handed off: the memory job's row, written beside the final
        checkpoint, is durable before `end`."""
        if self.handoffs:
            await asyncio.wait(self.handoffs)

    async def free_thread(self) -> None:
        """Release the thread's lock, before `end` goes out: a follow-up sent right after `end` must be accepted."""
        await self.lease.release()
        self.joinable = False  # a rejoin from now on reads the stored run

    def publish_end(self, ending: RunEnding) -> None:
        """Count the run by how it ended, then send its stream's terminal event."""
        metrics.RUNS.labels(ending.status).inc()
        if isinstance(ending.terminal, Failure):
            self.stream.fail(ending.terminal)
        elif ending.terminal is not None:
            self.stream.end(ending.terminal)


@dataclass(frozen=True, slots=True)
class RunEnding:
    """What ended a run: its status, the terminal event its stream gets, and the error behind it."""

    status: OutcomeStatus | Literal["cancelled"] = "error"
    terminal: GraphOutcome | Failure | None = None
    """The stream's last event: `end` for an outcome, `error` for a failure, none if unknown."""
    error: BaseException | None = None
    """What failed (the model's failure, or what the graph raised); logged and traced."""
    by_user: bool = False
    """A user's cancel stopped it: its record is written as cancelled."""

    @property
    def escaping(self) -> BaseException | None:
        """Return what the run's task raises once the run is finished: a shutdown's cancellation."""
        return self.error if self.error is not None and not isinstance(self.error, Exception) else None


UNKNOWN_ENDING = RunEnding()
"""The ending of a run that raised before its end was known: an error, with no terminal event."""


class RunSink:
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


def report_end(run: InFlight, ending: RunEnding, sink: RunSink, trace: RunTrace) -> None:
    """Time the finished run, close its span and log how it ended."""
    elapsed = time.perf_counter() - sink.started
    metrics.RUN_SECONDS.observe(elapsed)
    ttft_ms = sink.ttft_ms
    failure = ending.error
    trace.end(status=ending.status, ttft_ms=ttft_ms, error=failure)
    log.log(
        logging.WARNING if failure else logging.INFO,
        "run finished",
        # The chain's types and frames (logs.py), never its messages: they can quote text.
        exc_info=failure,
        extra={
            "thread_id": run.thread_id,
            "run_id": run.run_id,
            "tenant_id": run.caller.tenant_id,
            "status": ending.status,
            "error": None if failure is None else type(failure).__name__,
            "reason": ending.terminal.reason if isinstance(ending.terminal, Failure) else None,
            "model_error": getattr(failure, "error_class", None),
            "model_status": getattr(failure, "status", None),
            "duration_ms": round(elapsed * 1000, 1),
            "ttft_ms": ttft_ms,
        },
    )
