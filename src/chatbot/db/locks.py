"""Advisory locks on threads and users, many per connection: a run holds no connection.

A run holds its thread's lock for as long as it answers: seconds with a real model. One
connection per held lock capped a replica at its lock pool and two replicas exhausted a
default Postgres (docs/scaling.md). A session advisory lock belongs to a session, not to a
query, so one session can hold thousands: a replica keeps a few dedicated lock sessions
(`CHATBOT_LOCK_CONNECTIONS`, on `CHATBOT_LOCK_DATABASE_URL`, a direct or session-pooled
URI since PgBouncer's transaction mode cannot carry session locks, db/lock_sessions.py) and
spreads keys over them. The fences are here too; locks held for one transaction on a pool
connection are db/transaction_locks.py's.

What this keeps:
- 409 across replicas: `pg_try_advisory_lock` never waits.
- Two local holders of one key kept apart: session locks are re-entrant within a session,
  so Postgres would grant a second local holder on the same session; a table of the keys
  this process holds refuses it first, without a round trip.
- A killed replica frees its threads at once: its sessions end with its process.
- A lock session that drops loses every lock on it. Its leases report `lost` once that is
  noticed (a ping per second, or the next statement), and thread leases carry a fence
  token (migration 0005) that every checkpoint write of the run checks in its own
  transaction (db/saver.py): a run that lost its lock cannot write after another holder
  took the thread; it fails cleanly instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import AsyncConnection

from chatbot.db.connection_options import ConnectionOptions
from chatbot.db.lock_sessions import LockParams, LockSession
from chatbot.db.transactions import AfterCommit, one_flush_transaction
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.tasks import stop_task

# hashtextextended(namespace || id) -> bigint: thread locks cannot collide with the
# migration lock (two-int form) or with user locks (another namespace).
_THREAD_KEY = "hashtextextended('chatbot/thread/' || %(thread)s, 0)"
_USER_KEY = "hashtextextended('chatbot/user/' || %(tenant)s || '/' || %(user)s, 0)"

_ERASE_KEY = "hashtextextended('chatbot/erase/' || %(tenant)s || '/' || %(user)s, 0)"

# Taking a thread lock, then (only when it was granted) setting the thread's fence token:
# two statements on the lock session. The lock is the coordinator's (every lock session
# connects there); the fence row lives beside the thread's checkpoints, on the worker
# holding that thread on Citus. One statement for both would make Citus plan the upsert
# through the coordinator, so the fence is a statement of its own naming one thread_id,
# sent only after a granted lock (docs/scaling.md).
_TRY_THREAD = f"select pg_try_advisory_lock({_THREAD_KEY}) as ok, true as user_ok"
# The fence statement also reads who wrote the thread's first checkpoint (its owner,
# threads/_ownership.py), under the lock just granted: a run re-checks its owner there
# without a round trip of its own. Both are one function (migration 0010): Citus hands the
# call to the worker holding the thread in one step (a writing CTE beside the read took two),
# and the owner it reads is `langgraph_threads.OWNER_OF_THREAD`'s (the same row, no row before
# the thread's first checkpoint).
_SET_FENCE = "select tenant_id, user_id from chatbot_set_fence(%(thread)s, %(token)s)"
_UNLOCK_THREAD = f"select pg_advisory_unlock({_THREAD_KEY})"

# A run's thread lock comes with a shared hold on its user's erasure key, in the same
# round trip: an erasure takes that key exclusively, so it waits for the user's runs in
# flight on every thread, and refuses new ones until it is done (ops/erasure.py). A shared
# hold whose thread lock was refused is given back at once.
_UNLOCK_RUN = f"select pg_advisory_unlock({_THREAD_KEY}), pg_advisory_unlock_shared({_ERASE_KEY})"
# A run's start in one round trip (migration 0013: `_THREAD_KEY` and `_ERASE_KEY` computed there): the owner
# check, both locks, the fence token and the owner read under the lock, in one function run
# on the coordinator. A thread another caller created is refused before any lock is touched.
_TAKE_RUN = (
    "select ok, user_ok, owned, tenant_id, user_id"
    " from chatbot_take_thread(%(thread)s, %(token)s, %(tenant)s, %(user)s)"
)
_TRY_USER = f"select pg_try_advisory_lock({_USER_KEY}) as ok"
_UNLOCK_USER = f"select pg_advisory_unlock({_USER_KEY})"
_TRY_ERASE = f"select pg_try_advisory_lock({_ERASE_KEY}) as ok"
_UNLOCK_ERASE = f"select pg_advisory_unlock({_ERASE_KEY})"

# Whether any session (of any replica) holds the thread's lock: for followers of a run
# executing elsewhere. A bigint advisory key shows in pg_locks split into two oids.
THREAD_LOCKED = f"""
select exists (
    select 1 from pg_locks
    where locktype = 'advisory' and objsubid = 1 and granted
      and classid = (({_THREAD_KEY} >> 32) & 4294967295)::oid
      and objid = ({_THREAD_KEY} & 4294967295)::oid
) as locked
"""


async def thread_locked(conn: AsyncConnection[Any], thread_id: ThreadId) -> bool:
    """Return whether any session (of any replica) holds the thread's lock.

    A statement of its own, never joined with a table read: on Citus the lock table read is
    the coordinator's, where every lock session is, while a statement that also read a
    distributed table would be sent to a worker and read that worker's lock table instead.
    """
    row = await (await conn.execute(THREAD_LOCKED, {"thread": thread_id})).fetchone()
    return bool(row and row["locked"])


# The fence row outside the lock's own upsert: a cancel locks it, reads it and revokes the
# run's token (threads/cancel.py); a refused first run deletes the row its lock set
# (threads/deletion.py), only while the row still holds that lock's token.
_LOCK_FENCE = "select token from thread_fences where thread_id = %(thread)s for update"
_REVOKE_FENCE = "update thread_fences set token = %(token)s where thread_id = %(thread)s"
_FENCE_TOKEN = "select token from thread_fences where thread_id = %(thread)s"
_FORGET_FENCE = "delete from thread_fences where thread_id = %s and token = %s"


async def lock_fence(conn: AsyncConnection[Any], thread_id: ThreadId) -> str | None:
    """Lock the thread's fence row until the transaction ends; return its token, None without a row."""
    row = await (await conn.execute(_LOCK_FENCE, {"thread": thread_id})).fetchone()
    return None if row is None else str(row["token"])


async def revoke_fence(conn: AsyncConnection[Any], thread_id: ThreadId, token: str) -> None:
    """Replace the thread's fence token with `token` (a cancel's)."""
    await conn.execute(_REVOKE_FENCE, {"thread": thread_id, "token": token})


async def fence_token(conn: AsyncConnection[Any], thread_id: ThreadId) -> str | None:
    """Return the thread's fence token, None without a row."""
    row = await (await conn.execute(_FENCE_TOKEN, {"thread": thread_id})).fetchone()
    return None if row is None else str(row["token"])


async def forget_fence(conn: AsyncConnection[Any], thread_id: ThreadId, token: str) -> None:
    """Delete the thread's fence row if it still holds `token`."""
    await conn.execute(_FORGET_FENCE, (thread_id, token))


PING_SECONDS = 1.0


_FENCE_LOST = "CB001"  # SQLSTATE raised by chatbot_hold_fence (migration 0005)
_HOLD_FENCE = "select chatbot_hold_fence(%s, %s)"


@contextlib.asynccontextmanager
async def fenced_transaction(
    conn: AsyncConnection[Any], fence: Fence, *, after_commit: AfterCommit | None = None
) -> AsyncIterator[AsyncConnection[Any]]:
    """Run the statements inside as one transaction that only commits while `fence` is current.

    Every write of a run (its checkpoints, its recall rows) goes through here: the fence check
    is the transaction's first statement, in the same pipeline as the writes, and share-locks
    the thread's fence row, so a new holder's token update waits for a write already under
    way and a write after it fails with `LeaseLost` having written nothing. The whole
    transaction, `BEGIN` to `COMMIT`, goes out in one flush (db/transactions.py): one round trip.
    `after_commit` sends reads that follow the commit in that flush.
    """
    try:
        async with one_flush_transaction(conn, after_commit=after_commit):
            await conn.execute(_HOLD_FENCE, (fence.thread_id, fence.token))
            yield conn
    except psycopg.Error as exc:
        if exc.sqlstate == _FENCE_LOST:
            raise LeaseLost("the run's thread lock passed to another holder") from exc
        raise


class LeaseLost(Exception):
    """The run's thread lock was lost (its lock session dropped) and another holder may run."""


class UserErasing(Exception):
    """The run's user is being erased: no run of theirs may start until the erasure is done."""


class OwnedByAnother(Exception):
    """The thread was created by another caller: a run of this one is refused, no lock touched."""


@dataclass(frozen=True, slots=True)
class Fence:
    """A thread lease's fence token, checked by every checkpoint write of its run."""

    thread_id: ThreadId
    token: str


@dataclass(eq=False, slots=True)
class Lease:
    """A held advisory lock; `release` unlocks it on the session that took it."""

    _locks: Locks
    _name: str
    _session: LockSession
    _conn: AsyncConnection[Any]
    _unlock_sql: str
    _params: LockParams
    fence: Fence | None
    """For thread leases: the token every checkpoint write of the holder must carry."""
    shared: str | None = None
    """The key this lease also holds in shared mode (a run's user erasure key), if any."""
    owner: tuple[TenantId, UserId] | None = None
    """For thread leases: (tenant_id, user_id) of the thread's first checkpoint, read under
    the lock; None when the thread has no checkpoint yet."""
    _released: bool = field(default=False, init=False)

    @property
    def lost(self) -> bool:
        """Return True when the session that took the lock has dropped (the lock went with it)."""
        return self._session.conn is not self._conn or self._conn.closed

    async def release(self) -> None:
        """Release the lock; safe to call more than once, and under cancellation."""
        if self._released:
            return
        self._released = True
        # Shielded: a cancelled caller (client gone, shutdown) must still unlock, or the
        # thread would stay locked until the session is recycled.
        await asyncio.shield(self._unlock())

    async def _unlock(self) -> None:
        try:
            if not self.lost:
                await self._conn.execute(self._unlock_sql, self._params)
        except psycopg.Error:
            await self._session.drop(self._conn)  # a broken session holds no locks any more
        finally:
            self._locks.forget(self._name, self)


class Locks:
    """Try-locks on threads and users, shared by every replica through Postgres."""

    def __init__(self, conninfo: str, kwargs: ConnectionOptions, *, sessions: int = 2) -> None:
        self._sessions = [LockSession(conninfo, kwargs, f"locks-{i}") for i in range(sessions)]
        self._held: dict[str, Lease | None] = {}  # None: being acquired
        self._shared: Counter[str] = Counter()  # keys this process holds in shared mode, by holders
        self._pinger: asyncio.Task[None] | None = None
        self._attempts: dict[str, asyncio.Future[Lease | None]] = {}  # lock statements under way, by key

    async def open(self) -> None:
        """Start the session watcher (sessions connect on first use, so a down database does not stop start-up)."""
        self._pinger = asyncio.create_task(self._watch(), name="lock-sessions")

    async def close(self) -> None:
        """Stop watching and close the sessions (Postgres releases whatever they held)."""
        await stop_task(self._pinger)
        for session in self._sessions:
            await session.close()

    def holds_thread(self, thread_id: ThreadId) -> bool:
        """Return True when a lease of this process holds (or is taking) the thread's lock."""
        return f"thread/{thread_id}" in self._held

    async def try_thread(self, thread_id: ThreadId) -> Lease | None:
        """Take the thread's lock (and a fresh fence token) now, or return None when it is held."""
        token = str(uuid.uuid4())
        params = LockParams(thread=thread_id, token=token)
        return await self._try(f"thread/{thread_id}", _TRY_THREAD, _UNLOCK_THREAD, params, Fence(thread_id, token))

    async def try_run(self, thread_id: ThreadId, tenant_id: TenantId, user_id: UserId) -> Lease | None:
        """Take a run's thread lock and a shared hold on its user's erasure key, or return None.

        One round trip: the thread's owner is checked first and the fence set under the lock
        in the same statement. None when the thread is held; raise `OwnedByAnother` when
        another caller created the thread, `UserErasing` when the user is being erased.
        """
        erasure = f"erase/{tenant_id}/{user_id}"
        if erasure in self._held:
            raise UserErasing()
        token = str(uuid.uuid4())
        params = LockParams(thread=thread_id, token=token, tenant=tenant_id, user=user_id)
        fence = Fence(thread_id, token)
        return await self._try(f"thread/{thread_id}", _TAKE_RUN, _UNLOCK_RUN, params, fence, shared=erasure)

    async def wait_erasure(self, tenant_id: TenantId, user_id: UserId, timeout: float) -> Lease | None:
        """Poll for the user's erasure key, exclusive: granted once no run of the user is in flight."""
        params = LockParams(tenant=tenant_id, user=user_id)
        name = f"erase/{tenant_id}/{user_id}"
        return await _poll(lambda: self._try(name, _TRY_ERASE, _UNLOCK_ERASE, params, None), timeout)

    async def try_user(self, tenant_id: TenantId, user_id: UserId) -> Lease | None:
        """Take the (tenant, user) lock now, or return None when someone holds it."""
        params = LockParams(tenant=tenant_id, user=user_id)
        return await self._try(f"user/{tenant_id}/{user_id}", _TRY_USER, _UNLOCK_USER, params, None)

    async def wait_thread(self, thread_id: ThreadId, timeout: float) -> Lease | None:
        """Poll for the thread's lock up to `timeout` seconds (polling: see migrate.py)."""
        return await _poll(lambda: self.try_thread(thread_id), timeout)

    async def wait_user(self, tenant_id: TenantId, user_id: UserId, timeout: float) -> Lease | None:
        """Poll for the (tenant, user) lock up to `timeout` seconds."""
        return await _poll(lambda: self.try_user(tenant_id, user_id), timeout)

    def forget(self, name: str, lease: Lease) -> None:
        """Drop a released lease from the tables of held keys."""
        if self._held.get(name) is lease:
            del self._held[name]
            self._unshare(lease.shared)

    def _unshare(self, shared: str | None) -> None:
        if shared is not None:
            self._shared[shared] -= 1
            if self._shared[shared] <= 0:
                del self._shared[shared]

    async def _try(
        self,
        name: str,
        sql: str,
        unlock_sql: str,
        params: LockParams,
        fence: Fence | None,
        *,
        shared: str | None = None,
    ) -> Lease | None:
        while shared is not None and (taking := self._attempts.get(name)) is not None:
            # Runs' attempts under way here decide first, one after another: a refused one
            # (another caller's thread, refused before any lock) leaves the thread to this
            # one, not a 409. Checked again after each wait: another refused caller may have
            # started its attempt while this one waited.
            await asyncio.wait({taking})
        if name in self._held or self._shared[name] > 0:
            # Held (or being taken) by this process: never re-enter a session lock, and never
            # take exclusively what a local holder has in shared mode (one session would not
            # conflict with itself).
            return None
        self._held[name] = None
        if shared is not None:
            self._shared[shared] += 1
        session = self._sessions[hash(name) % len(self._sessions)]
        # The statement runs in a task of its own: if the caller is cancelled after Postgres
        # granted the lock, the lease must still be released, not leaked on the session.
        attempt = asyncio.ensure_future(self._take(name, session, sql, unlock_sql, params, fence, shared))
        self._attempts[name] = attempt
        attempt.add_done_callback(
            lambda done: self._attempts.pop(name, None) if self._attempts.get(name) is done else None
        )
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            attempt.add_done_callback(_release_abandoned)
            raise

    async def _take(
        self,
        name: str,
        session: LockSession,
        sql: str,
        unlock_sql: str,
        params: LockParams,
        fence: Fence | None,
        shared: str | None,
    ) -> Lease | None:
        try:
            conn, row = await session.fetch(sql, params)
        except BaseException:
            del self._held[name]
            self._unshare(shared)
            raise
        if not row["ok"]:
            del self._held[name]
            self._unshare(shared)
            if row.get("owned") and (row["tenant_id"], row["user_id"]) != (params.get("tenant"), params.get("user")):
                raise OwnedByAnother()
            if not row.get("user_ok", True):
                raise UserErasing()
            return None
        owner = None
        if "owned" in row:  # the statement set the fence and read the owner under the lock itself
            owner = (TenantId(row["tenant_id"]), UserId(row["user_id"])) if row["owned"] else None
        elif fence is not None:
            owner = await self._set_fence(name, session, conn, unlock_sql, params, shared)
        lease = Lease(self, name, session, conn, unlock_sql, params, fence, shared, owner)
        self._held[name] = lease
        return lease

    async def _set_fence(
        self,
        name: str,
        session: LockSession,
        conn: AsyncConnection[Any],
        unlock_sql: str,
        params: LockParams,
        shared: str | None,
    ) -> tuple[TenantId, UserId] | None:
        """Give the thread a fresh fence token under the lock just granted; return its owner.

        The lock is given back when this fails.
        """
        try:
            row = await (await conn.execute(_SET_FENCE, params)).fetchone()
            return None if row is None else (TenantId(row["tenant_id"]), UserId(row["user_id"]))
        except BaseException:
            # A lock without its token would let the previous holder keep writing: give it back.
            with contextlib.suppress(Exception):
                await conn.execute(unlock_sql, params)
            if conn.broken:
                await session.drop(conn)
            del self._held[name]
            self._unshare(shared)
            raise

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(PING_SECONDS)
            for session in self._sessions:
                await session.ping()


_releasing: set[asyncio.Task[None]] = set()


def _release_abandoned(attempt: asyncio.Future[Lease | None]) -> None:
    if attempt.cancelled() or attempt.exception() is not None:
        return
    lease = attempt.result()
    if lease is not None:
        task = asyncio.ensure_future(lease.release())
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)


async def _poll(attempt: Any, timeout: float) -> Lease | None:
    deadline = asyncio.get_running_loop().time() + timeout
    delay = 0.02
    while True:
        lease: Lease | None = await attempt()
        now = asyncio.get_running_loop().time()
        if lease is not None or now >= deadline:
            return lease
        await asyncio.sleep(min(delay, max(0.0, deadline - now)))
        delay = min(delay * 2, 0.25)
