"""Lost lock sessions in a run's summary fold or recall step, against DELETE and erasure: a property test.

Two replicas (as in test_interleavings.py) with a window small enough that a thread of a
few turns needs recall and folds its first turns into the summary, and each replica's recall
and summary model held at gates the example opens. Each example writes a thread of one fresh
user holding a secret, starts a run on a replica hypothesis picks and holds it where drawn:
inside its summary fold (the summary model slow at the provider, before recall and every
write of the run), or at its recall step (after its window and summary fold, before recall
searches and indexes). Then, as drawn: the running replica's lock sessions are ended
from the server side or not; the thread is deleted, or its user erased, from the other replica
while the run is held (its lock lost), or from either at a drawn moment after it is let go; another tenant
then takes the thread id or not. The invariants:

- the run ends with exactly one `end` or `error` event;
- a `204` delete or a `200` erasure leaves no row anywhere in the database (every table, text
  and bytea) holding the thread id, the secret or, after an erasure, the user id;
- another tenant on the same thread id is given none of the first user's turns, in its
  window (the record's messages) or in `context.recalled`.

`make test` runs `CHATBOT_INTERLEAVINGS` / 20 drawn examples (5 by default), `make faults` 50,
after two fixed examples: the fold held, its locks lost, the thread deleted or the user erased
meanwhile, the thread id reused. Every example checks that its run was held where drawn before going on.
`CHATBOT_INTERLEAVINGS_SEED=N` replays a run.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from chatbot.caller import CallerContext
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.models.chain import ChainEntry
from tests.fixtures.app import services_of
from tests.fixtures.catalogue import rows_containing
from tests.fixtures.lost_locks import Gate, HeldFold, HeldRecall, terminate_lock_sessions
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until
from tests.hardening.test_interleavings import EXAMPLES, SEED, Replicas, _drain, serving
from tests.recall.test_recall_scope import SMALL

TENANT = "lost-locks"
NEXT_TENANT = "lost-locks-next"
# The recent list is the whole thread and the window leaves its first turns out, so recall runs,
# and a batch of them has left it (a fold is due: from the 13th run at this window).
TURNS = 14
REUSE_TURNS = 10


class HeldReplicas(Replicas):
    """The two replicas, each with its recall and summary model behind gates, and a window a short thread outgrows."""

    def __init__(self, database_url: str) -> None:
        super().__init__(database_url)
        self.recalls = [HeldRecall(), HeldRecall()]
        self.folds = [HeldFold(), HeldFold()]

    def app_settings(self, replica: int) -> dict[str, Any]:
        """Return replica `replica`'s settings: the small window, its held recall and summary model."""
        overrides = {
            "recall": self.recalls[replica],
            "summary_model": ChainEntry("held-fold", self.folds[replica]),
            # A held fold waits for the example, not for the fold's timeout to keep the old summary.
            "summary_timeout_seconds": 120.0,
        }
        return {"context_tokens": SMALL, "agent_overrides": overrides}

    async def open(self) -> None:
        await super().open()
        for recall, client in zip(self.recalls, self.clients, strict=True):
            recall.bind(client)


@pytest.fixture(scope="module")
def held_replicas(migrated_database_url: str) -> Iterator[HeldReplicas]:
    yield from serving(HeldReplicas(migrated_database_url))


@dataclass(frozen=True)
class Plan:
    """One interleaving: where the run is held, whether its locks go, what is sent from where, and when."""

    runs_on: int
    hold_at: str  # "fold" | "recall"
    lose_locks: bool
    action: str | None  # "delete" | "erase" | None
    actor: int  # the replica the DELETE or erasure is sent to
    after_ms: int | None  # None: sent while the run is held; else this long after it is let go
    reuse: bool  # another tenant takes the thread id afterwards


def _plans() -> st.SearchStrategy[Plan]:
    replica = st.integers(0, 1)
    plans = st.builds(
        Plan,
        runs_on=replica,
        hold_at=st.sampled_from(["fold", "recall"]),
        lose_locks=st.booleans(),
        action=st.sampled_from(["delete", "erase", None]),
        actor=replica,
        after_ms=st.none() | st.integers(0, 30),
        reuse=st.booleans(),
    )
    # While the run is held, only a lost lock lets the thread go (else an erasure waits the run
    # out), and only on the other replica: the running one still counts the run's lease as its own.
    return plans.filter(lambda plan: plan.after_ms is not None or (plan.lose_locks and plan.actor != plan.runs_on))


@dataclass
class Played:
    """What the clients were told."""

    events: list[Any]
    gone: bool  # the thread was deleted or its user erased (204 / 200)
    erased: bool
    reused: list[dict[str, Any]]  # the next tenant's run records on the thread id


async def _act(client: httpx.AsyncClient, plan: Plan, thread: str, user: str) -> int | None:
    """Send the plan's DELETE or erasure; while the run holds its lock this is a 409 (waited out when it was lost)."""
    if plan.action is None:
        return None
    headers = auth(tenant=TENANT, user=user, locale="en-US")
    url = f"/v1/threads/{thread}" if plan.action == "delete" else f"/v1/users/{user}"
    done = 204 if plan.action == "delete" else 200

    async def sent() -> int:
        return (await client.delete(url, headers=headers)).status_code

    if plan.after_ms is None:
        # The lock went with its session: the thread and the user are free at once (a moment for Postgres).
        return await wait_until(lambda: _status_if(sent, done), what="the lost lock to free the thread")
    return await sent()


async def _status_if(sent: Any, done: int) -> int | None:
    status: int = await sent()
    return status if status == done else None


async def _play(pair: HeldReplicas, plan: Plan) -> tuple[Played, str, str, str]:
    user, secret = f"u{uuid.uuid4().hex[:12]}", f"SEC{uuid.uuid4().hex[:10].upper()}"
    thread = f"lk-{uuid.uuid4().hex[:12]}"  # naming neither the user nor the secret
    running = pair.clients[plan.runs_on]
    headers = {"Accept": "application/json", **auth(tenant=TENANT, user=user, locale="en-US")}
    # Folds naming the secret fail until the held run's (armed below), so that run has a batch to fold.
    fold = pair.folds[plan.runs_on].hold(secret) if plan.hold_at == "fold" else None
    for turn in range(TURNS):
        body = {"message": {"content": f"My policy code is {secret}-{turn}; claim number {turn}."}}
        response = await running.post(f"/v1/threads/{thread}/runs", json=body, headers=headers)
        assert response.status_code == 200, response.text
    gate: Gate
    if fold is not None:
        fold.armed, gate = True, fold
    else:
        gate = pair.recalls[plan.runs_on].hold(thread)
    caller = CallerContext(TenantId(TENANT), UserId(user), "en-US")
    listener = await services_of(running).runs.start(ThreadId(thread), caller, "Which policy code did I give first?")
    drained = asyncio.ensure_future(_drain(listener))
    reached = asyncio.ensure_future(gate.reached.wait())
    await asyncio.wait([reached, drained], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    reached.cancel()
    # Else the example would test nothing: the run ended, or hung, before its fold or recall step.
    assert gate.reached.is_set(), (plan, "never held", [e.event for e in drained.result()] if drained.done() else [])
    if plan.lose_locks:
        assert await terminate_lock_sessions(running, pair.database_url) >= 1
    if plan.after_ms is None:
        status = await _act(pair.clients[plan.actor], plan, thread, user)
        gate.release.set()
    else:
        gate.release.set()
        await asyncio.sleep(plan.after_ms / 1000)  # not polling: the plan's offset is the interleaving under test
        status = await _act(pair.clients[plan.actor], plan, thread, user)
    events = await drained
    for client in pair.clients:
        await services_of(client).runs.drain(10)
        await services_of(client).memory.drain(10)
    assert status is None or status < 500, (plan, status)
    gone = status in (200, 204)
    played = Played(events, gone, gone and plan.action == "erase", [])
    if gone and plan.reuse:
        played.reused = await _reuse(pair.clients[1 - plan.runs_on], thread)
    return played, user, thread, secret


async def _reuse(client: httpx.AsyncClient, thread: str) -> list[dict[str, Any]]:
    """Run the next tenant's turns on the thread id, long enough to need recall; return their records."""
    token = auth(tenant=NEXT_TENANT, user="next", locale="en-US")
    records = []
    for turn in range(REUSE_TURNS):
        body = {"message": {"content": f"Which documents do I need for claim {turn}?"}}
        end = await client.post(
            f"/v1/threads/{thread}/runs", json=body, headers={"Accept": "application/json", **token}
        )
        assert end.status_code == 200, end.text
        record = await client.get(f"/v1/threads/{thread}/runs/{end.json()['run_id']}", headers=token)
        records.append(record.json())
    return records


def _check(pair: HeldReplicas, plan: Plan, played: Played, user: str, thread: str, secret: str) -> None:
    terminal = [e for e in played.events if e.event in ("end", "error")]
    assert len(terminal) == 1, (plan, [e.event for e in played.events])
    for record in played.reused:
        context = record["context"]
        assert not [r for r in context["recalled"] if secret in r["content"]], plan
        assert not [m for m in context["messages"] if secret in m["content"]], plan
    if not played.gone:
        return
    url = pair.database_url
    if not played.reused:
        assert rows_containing(url, thread) == {}, (plan, thread, rows_containing(url, thread))
    assert rows_containing(url, secret) == {}, (plan, secret, rows_containing(url, secret))
    if played.erased:
        assert rows_containing(url, user) == {}, (plan, user, rows_containing(url, user))


def _property(pair: HeldReplicas) -> Any:
    @settings(
        max_examples=max(2, EXAMPLES // 20),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(plan=_plans())
    # What an outside probe found, in every run: the fold slow at the provider, the locks lost,
    # the thread deleted or the user erased from the other replica, and another tenant on the thread id after.
    @example(plan=Plan(0, "fold", lose_locks=True, action="erase", actor=1, after_ms=None, reuse=True))
    @example(plan=Plan(1, "fold", lose_locks=True, action="delete", actor=0, after_ms=None, reuse=True))
    def lost_locks(plan: Plan) -> None:
        played, user, thread, secret = pair.call(_play(pair, plan), timeout=120)
        _check(pair, plan, played, user, thread, secret)

    return seed(int(SEED))(lost_locks) if SEED else lost_locks


def test_lost_lock_sessions_in_a_fold_or_at_recall_against_delete_and_erasure_leave_nothing(
    held_replicas: HeldReplicas,
) -> None:
    _property(held_replicas)()
