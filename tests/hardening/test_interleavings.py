"""Cancel, end, delete, erase and feedback interleaved on two replicas: a property test.

Two replicas (apps in one process, on one database, each with its own pools, lock sessions
and cancel listener) serve one fresh user per example. Each example first answers a turn
on each of the user's two threads (something to rate), then starts a run on each thread on
a replica hypothesis picks and, while they stream, sends at drawn moments: cancels of those
runs (none, one, or two, to either replica), feedback on the finished turns, a thread
`DELETE` and a user erasure (either replica). Then it holds the invariants:

- one outcome per run: exactly one `end` or `error` event, and at most one cancel `202`;
  a run with a `202` ended `cancelled`;
- a record for every cancelled run, with what was shown (`answer.content` is the streamed
  text), unless its thread was deleted or its user erased;
- nothing of a deleted thread or an erased user left: no checkpoint, fence, feedback, memory
  job or memory item names them.

Each example plays up to three such interleavings at once (one user each). `make test` runs
`CHATBOT_INTERLEAVINGS` examples (default 100, about 200 interleavings); `make faults` 1,000.
Hypothesis prints the failing interleaving; `CHATBOT_INTERLEAVINGS_SEED=N` replays a run.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Awaitable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from chatbot.caller import CallerContext
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.threads._stream import Listener
from tests.fixtures.app import running_app, services_of
from tests.fixtures.tokens import auth

EXAMPLES = int(os.environ.get("CHATBOT_INTERLEAVINGS", "100"))
SEED = os.environ.get("CHATBOT_INTERLEAVINGS_SEED")
TENANT = "interleave"
QUESTION = "What does travel insurance cover for medical costs abroad?"
REMEMBER = "Please remember that my car is a 2019 Toyota Corolla."
THREADS = 2
AT_ONCE = 3  # interleavings played together in one example, one user each
T = TypeVar("T")


class Replicas:
    """Two apps served on an event loop of their own thread, so hypothesis's sync examples can drive them."""

    def __init__(self, database_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="replicas", daemon=True)
        self.thread.start()
        self.stack = AsyncExitStack()
        self.database_url = database_url
        self.clients: list[httpx.AsyncClient] = []

    def call(self, work: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self.loop)
        return future.result(timeout)

    def app_settings(self, replica: int) -> dict[str, Any]:
        """Return the settings and agent overrides replica `replica` is started with."""
        # Offline answers a token every 1 ms: a cancel can land before, during or after the stream.
        return {"offline_token_delay_ms": 1}

    async def open(self) -> None:
        for replica in range(2):
            client = await self.stack.enter_async_context(running_app(self.database_url, **self.app_settings(replica)))
            self.clients.append(client)

    async def close(self) -> None:
        await self.stack.aclose()
        # What the apps left on this loop (the store's batch task) ends before the loop does.
        current = asyncio.current_task()
        left = [task for task in asyncio.all_tasks() if task is not current]
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    def stop(self) -> None:
        self.call(self.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


R = TypeVar("R", bound=Replicas)


def serving(pair: R) -> Iterator[R]:
    """Open the replicas, yield them, and stop them (a module fixture's body)."""
    try:
        pair.call(pair.open())
        yield pair
    finally:
        pair.stop()


@pytest.fixture(scope="module")
def replicas(migrated_database_url: str) -> Iterator[Replicas]:
    yield from serving(Replicas(migrated_database_url))


@dataclass(frozen=True)
class Plan:
    """One interleaving: where each run starts, and what is sent to which replica, when (ms)."""

    runs_on: tuple[int, ...]  # the replica of each thread's run
    cancels: tuple[tuple[int, int, int], ...]  # (thread, replica, at ms)
    feedback: tuple[tuple[int, int, int], ...]  # (thread, replica, at ms) on the thread's answered turn
    delete: tuple[int, int, int] | None  # (thread, replica, at ms)
    erase: tuple[int, int] | None  # (replica, at ms)


def _plans() -> st.SearchStrategy[Plan]:
    replica = st.integers(0, 1)
    thread = st.integers(0, THREADS - 1)
    at = st.integers(0, 40)
    return st.builds(
        Plan,
        runs_on=st.tuples(*[replica] * THREADS),
        cancels=st.lists(st.tuples(thread, replica, at), max_size=4).map(tuple),
        feedback=st.lists(st.tuples(thread, replica, at), max_size=2).map(tuple),
        delete=st.none() | st.tuples(thread, replica, at),
        erase=st.none() | st.tuples(replica, at),
    )


@dataclass
class Seen:
    """What the clients were told."""

    run_ids: list[str] = field(default_factory=list)
    events: dict[str, list[Any]] = field(default_factory=dict)
    cancels: dict[str, list[int]] = field(default_factory=dict)
    deleted: bool = False
    erased: bool = False


async def _at(ms: int, work: Awaitable[httpx.Response]) -> httpx.Response:
    await asyncio.sleep(ms / 1000)  # not polling: the plan's offset is the interleaving under test
    return await work


async def _drain(listener: Listener) -> list[Any]:
    seen: list[Any] = []
    while not seen or seen[-1].event not in ("end", "error"):
        seen.append(await asyncio.wait_for(listener.queue.get(), 30))
    return seen


async def _play(pair: Replicas, plan: Plan, user: str) -> tuple[Seen, list[str]]:
    clients = pair.clients
    headers = auth(tenant=TENANT, user=user, locale="en-US")
    caller = CallerContext(TenantId(TENANT), UserId(user), "en-US")
    threads = [f"il-{user}-{n}" for n in range(THREADS)]
    firsts = await asyncio.gather(
        *(
            clients[n % 2].post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": REMEMBER if n == 0 else QUESTION}},
                headers={"Accept": "application/json", **headers},
            )
            for n, thread in enumerate(threads)
        )
    )
    assert all(first.status_code == 200 for first in firsts), [first.text for first in firsts]
    answered = [first.json()["run_id"] for first in firsts]
    seen = Seen()
    listeners = await asyncio.gather(
        *(
            services_of(clients[plan.runs_on[n]]).runs.start(ThreadId(thread), caller, QUESTION)
            for n, thread in enumerate(threads)
        )
    )
    seen.run_ids = [listener.run_id for listener in listeners]
    drains = [asyncio.ensure_future(_drain(listener)) for listener in listeners]
    sends: list[tuple[str, Any, asyncio.Future[httpx.Response]]] = []
    for thread, replica, ms in plan.cancels:
        run_id = seen.run_ids[thread]
        url = f"/v1/threads/{threads[thread]}/runs/{run_id}/cancel"
        sends.append(("cancel", run_id, asyncio.ensure_future(_at(ms, clients[replica].post(url, headers=headers)))))
    for thread, replica, ms in plan.feedback:
        url = f"/v1/threads/{threads[thread]}/runs/{answered[thread]}/feedback"
        rating = clients[replica].post(url, json={"score": "down", "comment": "wrong"}, headers=headers)
        sends.append(("feedback", thread, asyncio.ensure_future(_at(ms, rating))))
    if plan.delete is not None:
        thread, replica, ms = plan.delete
        deleting = clients[replica].delete(f"/v1/threads/{threads[thread]}", headers=headers)
        sends.append(("delete", thread, asyncio.ensure_future(_at(ms, deleting))))
    if plan.erase is not None:
        replica, ms = plan.erase
        erasing = clients[replica].delete(f"/v1/users/{user}", headers=headers)
        sends.append(("erase", None, asyncio.ensure_future(_at(ms, erasing))))
    for events, run_id in zip(await asyncio.gather(*drains), seen.run_ids, strict=True):
        seen.events[run_id] = events
    deleted_threads: list[str] = []
    for kind, subject, sent in sends:
        response = await sent
        assert response.status_code < 500, (kind, response.status_code, response.text)
        if kind == "cancel":
            seen.cancels.setdefault(subject, []).append(response.status_code)
        elif kind == "delete" and response.status_code == 204:
            deleted_threads.append(threads[subject])
        elif kind == "erase" and response.status_code == 200:
            seen.erased = True
    for client in clients:
        await services_of(client).runs.drain(10)
        await services_of(client).memory.drain(10)
    return seen, deleted_threads


async def _play_all(pair: Replicas, plans: list[Plan], users: list[str]) -> list[tuple[Seen, list[str]]]:
    """Play the plans at once, one user each: the replicas serve several interleavings together."""
    return list(await asyncio.gather(*(_play(pair, plan, user) for plan, user in zip(plans, users, strict=True))))


def _rows(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> int:
    row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


def _thread_rows(conn: psycopg.Connection[Any], thread: str) -> dict[str, int]:
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "thread_fences", "run_feedback")
    counts = {t: _rows(conn, f"select count(*) from {t} where thread_id = %s", (thread,)) for t in tables}
    return {t: n for t, n in counts.items() if n}


def _user_rows(conn: psycopg.Connection[Any], user: str) -> dict[str, int]:
    counts = {
        "run_feedback": _rows(
            conn, "select count(*) from run_feedback where tenant_id = %s and user_id = %s", (TENANT, user)
        ),
        "memory_jobs": _rows(
            conn, "select count(*) from memory_jobs where tenant_id = %s and user_id = %s", (TENANT, user)
        ),
        "store": _rows(conn, "select count(*) from store where prefix like %s", (f"{TENANT}.user.{user}.%",)),
        "checkpoints": _rows(conn, "select count(*) from checkpoints where metadata->>'user_id' = %s", (user,)),
    }
    return {t: n for t, n in counts.items() if n}


async def _record(pair: Replicas, user: str, thread: str, run_id: str) -> httpx.Response:
    headers = auth(tenant=TENANT, user=user, locale="en-US")
    return await pair.clients[1].get(f"/v1/threads/{thread}/runs/{run_id}", headers=headers)


def _check(pair: Replicas, plan: Plan, user: str, seen: Seen, deleted: list[str]) -> None:
    url = pair.database_url
    threads = [f"il-{user}-{n}" for n in range(THREADS)]
    for n, run_id in enumerate(seen.run_ids):
        events = seen.events[run_id]
        terminal = [e for e in events if e.event in ("end", "error")]
        assert len(terminal) == 1, (plan, run_id, [e.event for e in events])
        answers = seen.cancels.get(run_id, [])
        assert answers.count(202) <= 1, (plan, answers)
        assert set(answers) <= {202, 404, 409}, (plan, answers)
        if 202 in answers:
            assert terminal[0].event == "error" and terminal[0].data["reason"] == "cancelled", (plan, terminal)
        gone = seen.erased or threads[n] in deleted
        if terminal[0].event == "error" and terminal[0].data.get("reason") == "cancelled" and not gone:
            record = pair.call(_record(pair, user, threads[n], run_id))
            assert record.status_code == 200, (plan, record.text)
            body = record.json()
            shown = "".join(e.data["content"] for e in events if e.event == "token")
            assert body["status"] == "cancelled", (plan, body["status"])
            if shown:
                assert body["answer"]["content"] == shown and body["answer"]["complete"] is False, plan
    if not deleted and not seen.erased:
        return
    with psycopg.connect(url, autocommit=True) as conn:
        for thread in deleted:
            assert _thread_rows(conn, thread) == {}, (plan, thread)
        if seen.erased:
            assert _user_rows(conn, user) == {}, (plan, user)
            for thread in threads:
                assert _thread_rows(conn, thread) == {}, (plan, thread)


def _property(replicas: Replicas) -> Any:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(plans=st.lists(_plans(), min_size=1, max_size=AT_ONCE))
    def interleaving(plans: list[Plan]) -> None:
        users = [f"u{uuid.uuid4().hex[:12]}" for _ in plans]
        played = replicas.call(_play_all(replicas, plans, users))
        for plan, user, (seen, deleted) in zip(plans, users, played, strict=True):
            _check(replicas, plan, user, seen, deleted)

    return seed(int(SEED))(interleaving) if SEED else interleaving


def test_cancel_end_delete_erase_and_feedback_interleaved_on_two_replicas(replicas: Replicas) -> None:
    _property(replicas)()
