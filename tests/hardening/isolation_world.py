"""The isolation matrix's world: four callers, what each may see, and a ledger of what they saw.

Two tenants with the same two user ids (`u1`, `u2` in each), so a check that compared only
the user id, or only the tenant, lets one of them through. Every caller owns secrets (the
markers in its messages, fact and feedback comment, its run and message ids); the ledger
keeps every response body a caller received and, at the end, looks for any other caller's
secret in it. `Thread` and `World` hold what the test knows to be true: who owns each
raced thread, what the owner sent, which feedback and memory it must find again.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg

from tests.fixtures.tokens import auth

TENANT_A, TENANT_B = "iso-a", "iso-b"
USERS = ("u1", "u2")
JSON = {"Accept": "application/json"}

# Letters only: the PII guard refuses remember-statements with IBAN- or card-like digit runs,
# and a marker must survive storage as a fact.
_LETTERS = str.maketrans("0123456789", "ghijklmnop")


def marker() -> str:
    """Return a fresh 32-letter marker that cannot occur in any text by chance."""
    return "mk" + uuid.uuid4().hex.translate(_LETTERS)


def nonsense(mark: str) -> str:
    """Return a message no knowledge chunk answers: a clarifying turn, which writes no memory."""
    return f"zorblat frimble quaxx {mark}"


@dataclass(frozen=True, slots=True)
class Caller:
    """One (tenant, user) of the backend, as its tokens name it."""

    tenant: str
    user: str

    def headers(self, **extra: str) -> dict[str, str]:
        """Return headers with a fresh token (the long variant outlives a single token)."""
        return {**auth(self.tenant, self.user, locale="en-US"), **extra}

    def __str__(self) -> str:
        return f"{self.tenant}/{self.user}"


CALLERS = tuple(Caller(tenant, user) for tenant in (TENANT_A, TENANT_B) for user in USERS)


@dataclass
class Ledger:
    """What was sent, what came back, and every way isolation was found broken."""

    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    pairs: set[tuple[str, str]] = field(default_factory=set)
    intrusions: int = 0
    during_runs: int = 0
    owner_checks: int = 0
    failures: list[str] = field(default_factory=list)
    secrets: dict[Caller, set[str]] = field(default_factory=lambda: {c: set() for c in CALLERS})
    tenant_secrets: dict[str, set[str]] = field(default_factory=dict)
    bodies: list[tuple[Caller, str, str]] = field(default_factory=list)

    def seen(self, caller: Caller, label: str, response: httpx.Response) -> httpx.Response:
        """Count a response and keep its body for the leak scan."""
        self.requests += 1
        self.statuses[response.status_code] += 1
        self.bodies.append((caller, label, response.text))
        return response

    def expect(self, caller: Caller, label: str, response: httpx.Response, *allowed: int) -> bool:
        """Record a response; note a failure when its status is not one of `allowed`."""
        self.seen(caller, label, response)
        if response.status_code in allowed:
            return True
        self.fail(f"{caller} {label}: {response.status_code}, expected {allowed}")
        return False

    def fail(self, what: str) -> None:
        """Note one way isolation was broken."""
        self.failures.append(what)

    def own(self, caller: Caller, *values: str) -> None:
        """Add values only `caller` may ever be shown."""
        self.secrets[caller].update(v for v in values if v)

    def scan_for_leaks(self) -> int:
        """Look for every caller's secrets in every other caller's bodies; return the pairs scanned."""
        scanned = 0
        for caller, label, body in self.bodies:
            for other, secrets in self.secrets.items():
                if other == caller:
                    continue
                scanned += 1
                leaked = [s for s in secrets if s in body]
                if leaked:
                    self.fail(f"{caller} {label}: body carries {len(leaked)} secret(s) of {other}")
            for tenant, words in self.tenant_secrets.items():
                if tenant != caller.tenant and any(w in body for w in words):
                    self.fail(f"{caller} {label}: body carries tenant {tenant}'s knowledge")
        return scanned


@dataclass
class Thread:
    """A raced thread id, its owner, and what the owner put into it."""

    id: str
    owner: Caller
    client: httpx.AsyncClient
    sent: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    feedback: list[tuple[Any, ...]] = field(default_factory=list)
    snapshot: list[dict[str, Any]] | None = None


@dataclass
class World:
    """The replicas' clients, the database, and what the test knows to be true."""

    ledger: Ledger
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
    conn: psycopg.AsyncConnection[Any]
    a_only_chunks: set[str] = field(default_factory=set)
    memories: dict[Caller, dict[str, Any]] = field(default_factory=dict)
    first_run_statuses: Counter[int] = field(default_factory=Counter)
    probe_threads: dict[Caller, str] = field(default_factory=dict)
    in_flight: list[tuple[int, int]] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    beside_refusals: Counter[str] = field(default_factory=Counter)
    """Owners' runs sent while other callers' runs on their threads were being refused, and those refusals."""


def message(text: str) -> dict[str, Any]:
    """Return the body of a run carrying `text`."""
    return {"message": {"content": text}}


async def transcript(client: httpx.AsyncClient, caller: Caller, thread: str) -> list[dict[str, Any]] | None:
    """Return every message of the thread as its owner reads them, or None on 404."""
    messages: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        response = await client.get(f"/v1/threads/{thread}/messages", params=params, headers=caller.headers())
        if response.status_code == 404:
            return None
        response.raise_for_status()
        page = response.json()
        messages[:0] = page["messages"]
        if not page["has_more"]:
            return messages
        params["before"] = page["next_before"]


async def memory(client: httpx.AsyncClient, caller: Caller) -> dict[str, Any]:
    """Return what the service remembers of the caller, as the caller reads it."""
    response = await client.get(f"/v1/users/{caller.user}/memory", headers=caller.headers())
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


async def checkpoint_writers(conn: psycopg.AsyncConnection[Any], thread: str) -> set[tuple[str, str]]:
    """Return every (tenant, user) whose run wrote a checkpoint of the thread."""
    cur = await conn.execute(
        "select distinct metadata ->> 'tenant_id', metadata ->> 'user_id' from checkpoints where thread_id = %s",
        (thread,),
    )
    return {(row[0], row[1]) for row in await cur.fetchall()}


async def feedback_rows(conn: psycopg.AsyncConnection[Any], thread: str) -> list[tuple[Any, ...]]:
    """Return the thread's feedback as stored: run, who rated it, score and comment."""
    cur = await conn.execute(
        "select run_id::text, tenant_id, user_id, score, comment from run_feedback where thread_id = %s "
        "order by run_id",
        (thread,),
    )
    return [tuple(row) for row in await cur.fetchall()]
