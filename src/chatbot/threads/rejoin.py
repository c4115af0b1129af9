"""Rejoining a run's stream from any replica: follow it live, or replay it from its end.

- A run executing on this replica: listen to its stream from the client's offset.
- A run executing on another replica: wait for its end, polling its checkpoints and the
  thread's lock (a few cheap statements per second, only while someone follows it), then
  send the rest of the answer as one token and the end. Chosen over LISTEN/NOTIFY, which
  would cost every run a notification and every replica a session, for a path used only
  after a dropped connection (docs/scaling.md).
- A finished run: replay its answer and end from its final checkpoint.

A run's end is its final checkpoint (source "loop", written at the end with durability
"exit", also when the run failed), or the update a cancel wrote (threads/cancel.py): the
`turn` channel holds the question and the answer, `outcome` the status and hand-off, and a
failed run left an `__error__` write. The run record (db/run_record.py) is not read here.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from langchain_core.messages import AIMessage

from chatbot.agent.outcome import GraphOutcome
from chatbot.agent.result import failure_named
from chatbot.db.checkpoints import Checkpoints, StoredError
from chatbot.db.locks import thread_locked
from chatbot.db.pool import Pool
from chatbot.errors import Problem
from chatbot.failures import Failure
from chatbot.ids import RunId, ThreadId
from chatbot.threads import cancel
from chatbot.threads._stream import Listener, StreamEvent
from chatbot.threads.schemas import canonical_run_id
from chatbot.turns import message_meta

FOLLOW_POLL_SECONDS = 0.2
# An offset counts characters of one answer; 18 digits is far beyond any answer and still
# an int64, should it ever reach SQL.
_OFFSET = re.compile(r"[0-9]{1,18}")

INTERRUPTED = Failure("interrupted")


@dataclass(frozen=True, slots=True)
class Replayed:
    """A finished run as its record tells it: the answer text and the terminal event."""

    answer: str
    terminal: StreamEvent


def parse_last_event_id(value: str | None, run_id: RunId) -> int:
    """Return the answer offset a `Last-Event-ID` names (0 without one); 422 if it is not this run's.

    `run_id` is canonical (a `RunId` parameter); the header's run id may be in any case.
    """
    if value is None or not value.strip():
        return 0
    named_run, _, offset = value.strip().rpartition(":")
    # ASCII digits only: `str.isdigit()` also accepts "²" (a Latin-1 header byte), "①" and
    # "٣", which `int()` refuses or reads as another number.
    if canonical_run_id(named_run) != run_id or not _OFFSET.fullmatch(offset):
        raise Problem(422, "Last-Event-ID must be `<run_id>:<offset>` of this run")
    return int(offset)


class RunReplays:
    """Reads of runs' final checkpoints, for rejoins and replays."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.checkpoints = Checkpoints(pool)

    async def exists(self, thread_id: ThreadId, run_id: RunId) -> bool:
        """Return True when the thread has a checkpoint of the run."""
        return bool(await self.checkpoints.run_checkpoints(thread_id, run_id))

    async def replay(self, thread_id: ThreadId, run_id: RunId) -> Replayed | None:
        """Return the run's answer and terminal event, or None while it has no final checkpoint."""
        async with self.checkpoints.reading() as reader:
            rows = await reader.run_checkpoints(thread_id, run_id)
            # The run's end: the graph's final checkpoint, or the update a cancel wrote after
            # its first one, the user's message (threads/cancel.py).
            final = next((r for r in reversed(rows) if r.source == "loop"), None)
            if final is None and cancel.ended(rows):
                final = rows[-1]
            if final is None:
                return None
            turn = await reader.channel_value(thread_id, "turn", final.versions.get("turn"))
            outcome = await reader.channel_value(thread_id, "outcome", final.versions.get("outcome"))
            error = await reader.error_write(thread_id, final.checkpoint_id)
        answer = next(
            (m for m in turn or [] if isinstance(m, AIMessage) and message_meta(m).get("run_id") == run_id), None
        )
        ended = GraphOutcome.from_stored(outcome, str(answer.text) if answer is not None else "") if outcome else None
        if error is None and ended is not None and answer is not None and ended.message_id == answer.id:
            return Replayed(ended.answer, StreamEvent.end(run_id, thread_id, ended, len(ended.answer)))
        if error is None and ended is not None and ended.failure is not None:
            failure = ended.failure
        else:
            failure = _failure(error)
        return Replayed("", StreamEvent.error(failure, 0))

    async def follow(self, thread_id: ThreadId, run_id: RunId) -> Replayed:
        """Wait for a run executing elsewhere to end; return it as replayed from its final checkpoint."""
        while True:
            replayed = await self.replay(thread_id, run_id)
            if replayed is not None:
                return replayed
            async with self.checkpoints.reading() as reader:
                # Two statements: the lock table read must stay on the coordinator (locks.py).
                newest = await reader.newest_run(thread_id)
                locked = await thread_locked(reader.conn, thread_id)
            if newest != run_id or not locked:
                # Over without a final checkpoint? Read once more: the end is written before
                # the lock is released, possibly between the two reads above.
                replayed = await self.replay(thread_id, run_id)
                return replayed or Replayed("", StreamEvent.error(INTERRUPTED, 0))
            await asyncio.sleep(FOLLOW_POLL_SECONDS)


def _failure(error: StoredError | None) -> Failure:
    # A run whose graph raised left an `__error__` write, the exception's repr: its class name
    # says which reason it was (a model's failure is a typed outcome instead, agent/nodes.py).
    if error is None or error.text is None:
        return INTERRUPTED
    return failure_named(error.class_name)


def replay_listener(run_id: RunId, thread_id: ThreadId, delivered: int, replayed: Replayed) -> Listener:
    """Return a listener already holding a finished run's events past `delivered`."""
    listener = _rejoining(run_id, thread_id, delivered)
    _deliver(listener, replayed)
    return listener


def follower_listener(
    replays: RunReplays, run_id: RunId, thread_id: ThreadId, delivered: int
) -> tuple[Listener, asyncio.Task[None]]:
    """Return a listener fed by a task that waits for a run executing on another replica."""
    listener = _rejoining(run_id, thread_id, delivered)

    async def feed() -> None:
        try:
            replayed = await replays.follow(thread_id, run_id)
        except Exception:
            replayed = Replayed("", StreamEvent.error(Failure("database"), 0))
        _deliver(listener, replayed)

    return listener, asyncio.create_task(feed(), name=f"follow-{run_id}")


def _rejoining(run_id: RunId, thread_id: ThreadId, delivered: int) -> Listener:
    listener = Listener(run_id, thread_id, delivered, progress=False)
    listener.queue.put_nowait(StreamEvent.metadata(run_id, thread_id, delivered))
    return listener


def _deliver(listener: Listener, replayed: Replayed) -> None:
    if replayed.answer:
        listener.offer(StreamEvent.token(replayed.answer, len(replayed.answer)))
    terminal = replayed.terminal
    listener.offer(StreamEvent(terminal.event, terminal.data, max(terminal.offset, listener.delivered)))
