"""Stopping a run ("stop generating"), from any replica.

The decision is taken in Postgres, on the thread's fence row (db/locks.py, db/saver.py),
so a cancel racing the run's own end has exactly one outcome:

- The cancel locks the fence row (`for update`): a final checkpoint write under way holds
  the row in share mode, so the cancel waits for it to commit. It then reads, with a fresh
  snapshot, whether the run already ended (its final checkpoint exists, or its replica no
  longer holds the thread). If so: `409`, nothing changes.
- A fence that holds a cancel token already (`revoked`) means a cancel came first: `409`,
  nothing changes, so the first cancel's record is written under its token.
- Otherwise it replaces the fence token with the run's *cancel token* (derived from the
  run's own token, so only the holder can compute it) and notifies every replica, in the
  same transaction. From that commit on, the run's final write is refused by the fence: it
  can no longer end as answered. Its replica cancels the asyncio task that runs the graph
  (closing the provider's HTTP stream), records the run as cancelled under the cancel
  token, releases the thread and sends the `cancelled` error.

Replicas learn of a cancel by LISTEN on one dedicated session each (`CancelListener`): a
push, no statement per run, no polling. Should a notification be lost (the session was
reconnecting), the fence still refuses the run's final write and the run ends cancelled
then, only later.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable, Sequence

import psycopg
from psycopg import AsyncConnection

from chatbot.db.checkpoints import CheckpointReader, RunCheckpoint
from chatbot.db.connection_options import ConnectionOptions, without_rows
from chatbot.db.locks import Locks, fence_token, lock_fence, revoke_fence, thread_locked
from chatbot.db.pool import Pool
from chatbot.ids import RunId, ThreadId
from chatbot.tasks import stop_task

log = logging.getLogger(__name__)

CHANNEL = "chatbot_cancel"
_CANCEL_NAMESPACE = uuid.UUID("6f1c2a9e-3b7d-4c55-9a1e-0c7e4f2d8b13")

_NOTIFY = "select pg_notify(%(channel)s, %(payload)s)"


def cancel_token(token: str) -> str:
    """Return the fence token a cancel gives a run whose lease token is `token`."""
    return str(uuid.uuid5(_CANCEL_NAMESPACE, str(token)))


def revoked(token: str) -> bool:
    """Tell whether a fence token is a cancel's: the run it fenced was cancelled already.

    A lease's token is random (version 4, db/locks.py), a cancel's is derived (version 5): a
    second cancel must see the first one, or it would revoke the cancel token in turn and
    the run's record of what was shown, written under that token, would be refused.
    """
    try:
        return uuid.UUID(token).version == 5
    except ValueError:
        return False


def payload(thread_id: ThreadId, run_id: RunId) -> str:
    """Return the notification payload naming a run (thread ids hold no spaces)."""
    return f"{run_id} {thread_id}"


def parse_payload(text: str) -> tuple[ThreadId, RunId] | None:
    """Return (thread_id, run_id) of a notification payload, None when it is not one."""
    run_id, _, thread_id = text.partition(" ")
    return (ThreadId(thread_id), RunId(run_id)) if run_id and thread_id else None


def ended(checkpoints: Sequence[RunCheckpoint]) -> bool:
    """Tell whether a run's checkpoints (oldest first) hold its end: the final one, or a cancel."""
    return any(row.source == "loop" for row in checkpoints) or len(checkpoints) > 1


async def request_cancel(pool: Pool, locks: Locks, thread_id: ThreadId, run_id: RunId) -> bool:
    """Cancel the run if it is in flight (True), or leave everything as it is (False).

    One transaction on the thread's rows (every statement names the thread): lock the
    fence, check the run is the thread's newest, not ended and held, revoke and notify.
    """
    async with pool.connection() as conn, conn.transaction():
        fence = await lock_fence(conn, thread_id)
        if fence is None or revoked(fence):
            return False  # a second cancel (any replica): the first one's record stands
        reader = CheckpointReader(conn)
        checkpoints = await reader.run_checkpoints(thread_id, run_id)
        if not checkpoints or ended(checkpoints):
            return False
        if await reader.newest_run(thread_id) != run_id:
            return False
        if not locks.holds_thread(thread_id):
            if not await thread_locked(conn, thread_id):
                return False  # its replica stopped: the run was interrupted, it is over
        await revoke_fence(conn, thread_id, cancel_token(fence))
        await conn.execute(_NOTIFY, {"channel": CHANNEL, "payload": payload(thread_id, run_id)})
    return True


async def was_cancelled(pool: Pool, thread_id: ThreadId, token: str) -> bool:
    """Tell whether the thread's fence holds a cancel token of the lease `token` (`record_token`)."""
    return await record_token(pool, thread_id, token) is not None


# How many cancels deep a run's record may still be written: a replica of an older release
# revoked a revoked fence again (a second cancel) before `revoked` was checked.
_CANCEL_DEPTH = 4


async def record_token(pool: Pool, thread_id: ThreadId, token: str) -> str | None:
    """Return the fence token a cancelled run (lease `token`) writes its record under, if any.

    The fence's current token when it is a cancel of this run's lease (the first cancel's,
    or one an older replica's second cancel derived from it); None when another holder took
    the thread since (its lock session dropped): then the thread is no longer this run's.
    """
    async with pool.connection() as conn:
        current = await fence_token(conn, thread_id)
    derived = token
    for _ in range(_CANCEL_DEPTH):
        derived = cancel_token(derived)
        if current == derived:
            return current
    return None


async def thread_free(pool: Pool, locks: Locks, thread_id: ThreadId) -> bool:
    """Tell whether no session of any replica holds the thread's lock."""
    if locks.holds_thread(thread_id):
        return False
    async with pool.connection() as conn:
        return not await thread_locked(conn, thread_id)


OnCancel = Callable[[ThreadId, RunId], None]


class CancelListener:
    """One session per replica that LISTENs for cancels and hands each to `on_cancel`.

    On the lock URL (a direct or session-pooled connection: LISTEN belongs to a session).
    It connects in the background and reconnects after a drop, so a database that is down
    at start-up stops nothing.
    """

    RECONNECT_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)

    def __init__(self, conninfo: str, kwargs: ConnectionOptions, on_cancel: OnCancel) -> None:
        self._conninfo = conninfo
        self._kwargs = without_rows(kwargs)
        self._on_cancel = on_cancel
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()
        """Set while the session is listening (tests wait for it)."""

    def start(self) -> None:
        """Start listening in the background."""
        self._task = asyncio.create_task(self._run(), name="cancel-listener")

    async def stop(self) -> None:
        """Stop listening and close the session."""
        await stop_task(self._task)

    async def _run(self) -> None:
        attempt = 0
        while True:
            try:
                await self._listen()
                attempt = 0
            except (psycopg.Error, OSError) as exc:
                log.warning("cancel listener lost its session", extra={"error": type(exc).__name__})
            self.listening.clear()
            await asyncio.sleep(self.RECONNECT_SECONDS[min(attempt, len(self.RECONNECT_SECONDS) - 1)])
            attempt += 1

    async def _listen(self) -> None:
        conn = await AsyncConnection.connect(
            self._conninfo, **self._kwargs, application_name=f"chatbot-cancels-{os.getpid()}"
        )
        async with conn:
            await conn.execute(f"listen {CHANNEL}")
            self.listening.set()
            async for notify in conn.notifies():
                named = parse_payload(notify.payload)
                if named is not None:
                    self._on_cancel(*named)
