"""Run the soak: virtual users for a while, then check every thread against what its client was told."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg

from chatbot.client import ChatbotError
from tests.fixtures.wait import wait_until
from tests.soak.ledger import Verdict
from tests.soak.rss import RssSamples
from tests.soak.tally import Tally
from tests.soak.traffic import VirtualUser

# Runs a dropped connection left going, and memory writes, settle before the final check
# reads everything: a run holds its thread's lock (an advisory lock of its replica's lock
# session) to its end, and a memory job its `memory_jobs` row until its memory is written.
_BUSY = (
    "select (select count(*) from pg_locks where locktype = 'advisory' and granted and mode = 'ExclusiveLock' "
    "and database = (select oid from pg_database where datname = current_database()))"
    " + (select count(*) from memory_jobs) as n"
)
SETTLE_WITHIN = 60.0


@dataclass
class SoakResult:
    """What the soak sent, what it was answered, and what the checker found."""

    seconds: float
    users: int
    tally: Tally
    rss: RssSamples
    ops: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    verdict: Verdict = field(default_factory=Verdict)
    """Every thread checked once at the end of its life: before deletion or erasure, or after the soak."""
    midway: Verdict = field(default_factory=Verdict)
    """Threads checked while traffic went on."""
    remembered_seen: int = 0
    """Remembered facts the memory reads returned, each checked to be the reader's and of its current generation."""
    threads_live: int = 0
    threads_gone: int = 0

    @property
    def lost(self) -> list[str]:
        """Return acknowledged messages or answers missing from a transcript."""
        return self.verdict.lost + self.midway.lost

    @property
    def duplicated(self) -> list[str]:
        """Return messages or answers found more often than sent."""
        return self.verdict.duplicated + self.midway.duplicated

    @property
    def other(self) -> list[str]:
        """Return every other problem: altered or reordered messages, failed runs, unexpected statuses."""
        return self.problems + self.verdict.other + self.midway.other

    def report(self) -> str:
        """Return the figures as text (no message content)."""
        outcomes = "\n".join(f"  {kind}: {n}" for kind, n in sorted(self.outcomes.items()))
        return "\n".join(
            [
                f"soak: {self.seconds:.0f} s of traffic, {self.users} virtual users, {self.tally.total} requests",
                "requests by kind and status:",
                self.tally.table(),
                "operations: " + ", ".join(f"{kind} {n}" for kind, n in sorted(self.ops.items())),
                "outcomes:",
                outcomes,
                f"threads: {self.threads_live} live at the end, {self.threads_gone} deleted or erased (then 404)",
                f"messages checked at the end of each thread's life: {self.verdict.user_checked} user messages, "
                f"{self.verdict.answers_checked} answers ({self.verdict.maybes_landed} sends whose connection was "
                "dropped before an answer landed, once)",
                f"messages checked midway (page reads): {self.midway.user_checked} user messages, "
                f"{self.midway.answers_checked} answers",
                f"lost: {len(self.lost)}, duplicated: {len(self.duplicated)}, "
                f"5xx: {self.tally.server_errors}, other problems: {len(self.other)}",
                f"memory reads returned {self.remembered_seen} remembered facts, each the reader's own and none "
                "from before an erasure",
                "replica RSS:",
                self.rss.table(),
            ]
        )


async def run_soak(
    bases: list[str],
    pids: dict[str, int],
    secret: str,
    database_url: str,
    *,
    seconds: float,
    tenants: tuple[str, ...] = ("acme", "globex"),
    users_per_tenant: int = 3,
    think: float = 0.1,
    rss_period: float = 1.0,
    seed: int = 14,
) -> SoakResult:
    """Send mixed traffic to `bases` for `seconds`, then check every thread; return the figures."""
    tally = Tally()
    users = [
        VirtualUser(
            index=i,
            tenant=tenant,
            user=f"soak-u{n}",
            locale=("en-US", "fa-IR")[i % 2],
            bases=bases,
            secret=secret,
            tally=tally,
            seed=seed * 1000 + i,
        )
        for i, (tenant, n) in enumerate((t, n) for t in tenants for n in range(users_per_tenant))
    ]
    rss = RssSamples(pids)
    stop = asyncio.Event()
    sampler = asyncio.create_task(rss.sample_until(stop, rss_period))
    started = time.monotonic()
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        await asyncio.gather(*(user.soak(deadline, think) for user in users))
        elapsed = time.monotonic() - started
        stop.set()
        await sampler
        result = SoakResult(seconds=elapsed, users=len(users), tally=tally, rss=rss)
        await wait_until(lambda: settled(database_url), what="runs and memory work to settle", timeout=SETTLE_WITHIN)
        for user in users:
            await final_check(user, result)
    finally:
        stop.set()
        await asyncio.gather(*(user.aclose() for user in users))
    return result


async def settled(database_url: str) -> bool:
    """Tell whether no run holds a thread and no memory work is left, on the soak's database."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        row = await (await conn.execute(_BUSY)).fetchone()
    return row is not None and row[0] == 0


async def final_check(user: VirtualUser, result: SoakResult) -> None:
    """Check each of a user's threads in full (or that it is gone), and its memory."""
    result.ops += user.ops
    result.outcomes += user.outcomes
    result.problems += user.problems
    for ledger in user.threads:
        if ledger.gone is not None:
            result.threads_gone += 1
            try:
                await user.clients[0].messages(ledger.thread_id)
            except ChatbotError as exc:
                if exc.status != 404:
                    result.problems.append(f"{ledger.gone} thread {ledger.thread_id} answered {exc.status}")
            else:
                result.problems.append(f"{ledger.gone} thread {ledger.thread_id} is still readable")
            continue
        if not ledger.acked:
            continue  # only sends that got no answer: the thread may not exist
        result.threads_live += 1
        # Each replica reads half the threads: both must see the same record.
        await user.check(ledger, user.checked, replica=result.threads_live % len(user.clients))
    result.verdict.add(user.checked)
    result.midway.add(user.midway)
    memory = await user.clients[0].memory()
    user.problems.clear()
    result.remembered_seen += user.remembered_seen + user.check_facts([fact.text for fact in memory.facts])
    result.problems += user.problems
