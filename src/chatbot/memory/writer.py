"""The memory writer: answered turns become profile updates and facts, after the answer, durably.

Memory work must delay neither `end` nor the user's next message, so it runs here, outside
the thread's lock, in a queue per user: two threads of one user never race a
consolidation. Across replicas the same is guaranteed by the user's advisory lock, which
erasure takes too.

`submit` (the graph's sink) writes the turn's `memory_jobs` row before the run ends
(memory/jobs.py) and queues the job here at once; the work starts as soon as the run says
it ended answered (`MemoryJob.ended`). A replica killed before the write leaves the row;
every replica looks for rows whose claim ran out every `poll_seconds` and works them (a killed replica's jobs land
within `lease_seconds` + `poll_seconds` + the work). The write transaction deletes the row
first: a row that erasure, a memory reset or a thread deletion removed, or another worker
already did, is never worked, and a job lands once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from langgraph.store.base import TTLConfig
from psycopg import AsyncConnection

from chatbot import metrics
from chatbot.budgets.service import BudgetExhausted
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool
from chatbot.db.transactions import one_flush_transaction
from chatbot.ids import TenantId, UserId
from chatbot.memory import _profile_sources as profile_sources
from chatbot.memory import items, jobs, queries
from chatbot.memory._consolidation import StoredFact, consolidate
from chatbot.memory._instructions import instruction_kind
from chatbot.memory.extraction import (
    FactCandidate,
    MemoryCandidates,
    Profile,
    extract_offline,
    merge_profile,
    stored_profile,
)
from chatbot.memory.facts import Fact, FactSource, stored_source
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.namespaces import (
    PROFILE_KEY,
    PROFILE_SOURCES_KEY,
    facts_namespace,
    history_namespace,
    profile_namespace,
)
from chatbot.memory.pii import joined_rejection_reason, rejection_reason
from chatbot.memory.resets import hold_for_write
from chatbot.tasks import stop_task
from chatbot.timestamps import rfc3339

log = logging.getLogger(__name__)

Extractor = Callable[[MemoryJob], Awaitable[MemoryCandidates]]
MightWrite = Callable[[MemoryJob], bool]

# A fresh job whose run does not tell how it ended (a graph driven without the run service:
# the in-process benches) is worked once the run's final checkpoint is found, a few
# milliseconds after the job: these waits (about 10 s in all, for a loaded database) cover
# it, and bound the wait for a run that does tell; a run still unfinished after them is
# left to the pickup, after the job's claim runs out.
_SETTLE_WAITS = (0.01, 0.03, 0.06, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 3.2)
# A row claimed this many times without landing (its run never finished, or its work keeps
# failing) is dropped: the turn's memory is lost, counted, rather than retried forever.
MAX_CLAIMS = 5
PICKUP_BATCH = 20
# A value split over messages is looked for in a new fact read after each of the user's
# this many most recent facts (memory/pii.py `joined_rejection_reason`).
RECENT_FACTS_READ_TOGETHER = 3
# Closed facts kept per user (what was believed when); the oldest go first.
MAX_HISTORY = 100


async def offline_extractor(job: MemoryJob) -> MemoryCandidates:
    """Extract with the deterministic offline rules (once: the graph may have run them already)."""
    return offline_candidates(job)


def offline_candidates(job: MemoryJob) -> MemoryCandidates:
    """Return the offline rules' candidates of a job, reusing the graph's when it has them."""
    if job.offline_candidates is not None:
        return job.offline_candidates
    return extract_offline(job.user_text, locale=job.locale)


def offline_might_write(job: MemoryJob) -> bool:
    """Tell whether the offline rules find anything to write in the turn (no row otherwise).

    Before the PII guard, which runs once, in the work (where what it refuses is counted):
    a turn whose only fact the guard refuses costs a row that the work then drops.
    """
    candidates = offline_candidates(job)
    return bool(candidates.facts or candidates.profile_updates or candidates.rejected or candidates.instructions)


def lifetime_of(ttl: TTLConfig | None) -> items.Lifetime:
    """Return the items' lifetime of a store TTL configuration (memory/ttl.py)."""
    minutes = (ttl or {}).get("default_ttl")
    return items.Lifetime(None if minutes is None else float(minutes))


class MemoryWriter:
    """Durable memory jobs: written with the turn, worked at once here, picked up anywhere if this replica dies."""

    def __init__(
        self,
        *,
        pool: Pool,
        locks: Locks,
        max_facts: int,
        extractor: Extractor = offline_extractor,
        lock_wait: float = 30.0,
        ttl: TTLConfig | None = None,
        lease_seconds: float = 30.0,
        poll_seconds: float = 10.0,
        might_write: MightWrite | None = None,
    ) -> None:
        self.pool = pool
        self.locks = locks
        self.max_facts = max_facts
        self.extractor = extractor
        self.lock_wait = lock_wait
        self.lifetime = lifetime_of(ttl)
        self.lease = timedelta(seconds=lease_seconds)
        self.poll_seconds = poll_seconds
        # Without a predicate of its own, a custom extractor is asked about every turn.
        self.might_write = might_write or (offline_might_write if extractor is offline_extractor else None)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # Jobs with whether they are fresh (this replica's own, their run may still be ending).
        self._queues: dict[tuple[str, str], deque[tuple[MemoryJob, bool]]] = {}
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._poller: asyncio.Task[None] | None = None

    async def submit(self, job: MemoryJob) -> None:
        """Write the job's row (durable from here on) and queue it; the graph awaits this before the run ends."""
        if self.might_write is not None and not self.might_write(job):
            # A turn that holds nothing to remember costs no row, lock or transaction.
            metrics.MEMORY_WRITES.labels("nothing").inc()
            return
        try:
            # One round trip (one flush): this is awaited before the run's final checkpoint.
            async with self.pool.connection() as conn, one_flush_transaction(conn):
                # Shared with a reset's exclusive hold: a reset either deletes this row or comes after it.
                await hold_for_write(conn, job.tenant_id, job.user_id)
                await queries.insert_job(conn, job, now=items.utcnow(), lease=self.lease, holder=self.holder)
        except Exception as exc:  # the answer stands; its memory is lost, counted
            metrics.MEMORY_WRITES.labels("failed").inc()
            log.warning("memory job not recorded", extra={"run_id": job.run_id, "error": type(exc).__name__})
            return
        self._enqueue(job, fresh=True)

    def forget(self, tenant_id: TenantId, user_id: UserId) -> None:
        """Drop the user's queued jobs (erasure or reset was asked; their rows go with it)."""
        queue = self._queues.get((tenant_id, user_id))
        if queue:
            queue.clear()

    def start(self) -> None:
        """Start looking for jobs other replicas left behind."""
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll_forever(), name="memory-pickup")

    async def stop(self) -> None:
        """Stop looking for jobs (the queued ones are left to `drain`)."""
        await stop_task(self._poller)
        self._poller = None

    async def drain(self, timeout: float) -> None:
        """Finish queued work (graceful shutdown), up to `timeout` seconds; rows left are picked up elsewhere."""
        if self._workers:
            await asyncio.wait(set(self._workers.values()), timeout=timeout)

    async def pick_up(self) -> int:
        """Claim rows whose claim ran out and queue their jobs; return how many were claimed."""
        found = await jobs.free_rows(self.pool, items.utcnow(), PICKUP_BATCH)
        claimed = 0
        for thread_id, run_id in found:
            got = await jobs.claim(
                self.pool, thread_id, run_id, now=items.utcnow(), lease=self.lease, holder=self.holder
            )
            if got is None:
                continue  # another replica claimed it first
            job, claims = got
            if claims > MAX_CLAIMS:
                await jobs.discard(self.pool, thread_id, run_id)
                metrics.MEMORY_WRITES.labels("abandoned").inc()
                log.warning("memory job abandoned", extra={"run_id": run_id, "claims": claims})
                continue
            metrics.MEMORY_WRITES.labels("picked_up").inc()
            self._enqueue(job, fresh=False)
            claimed += 1
        return claimed

    async def _poll_forever(self) -> None:
        while True:
            # Jittered, so replicas started together do not scan together.
            await asyncio.sleep(self.poll_seconds * random.uniform(0.8, 1.2))
            try:
                await self.pick_up()
            except Exception as exc:  # Postgres away: the next round tries again
                log.warning("memory pickup failed", extra={"error": type(exc).__name__})

    def _enqueue(self, job: MemoryJob, *, fresh: bool) -> None:
        key = (job.tenant_id, job.user_id)
        self._queues.setdefault(key, deque()).append((job, fresh))
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._work(key), name=f"memory-{job.tenant_id}")

    async def _work(self, key: tuple[str, str]) -> None:
        queue = self._queues[key]
        try:
            while queue:
                job, fresh = queue.popleft()
                try:
                    await self._process(job, fresh)
                except Exception as exc:  # the row stays: picked up again after its lease
                    metrics.MEMORY_WRITES.labels("failed").inc()
                    log.warning("memory job failed", extra={"run_id": job.run_id, "error": type(exc).__name__})
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def _process(self, job: MemoryJob, fresh: bool) -> None:
        outcome = await self._outcome(job, fresh)
        if outcome == "unfinished":
            metrics.MEMORY_WRITES.labels("deferred").inc()  # picked up again after its lease
            return
        if outcome == "other":  # cancelled or failed after the job was written: no memory
            await jobs.discard(self.pool, job.thread_id, job.run_id)
            metrics.MEMORY_WRITES.labels("dropped_unanswered").inc()
            return
        try:
            candidates = await self.extractor(job)
        except BudgetExhausted as exc:
            # Skipped, not failed: the job waits for the budget's next period (or its expiry).
            until = items.utcnow() + timedelta(seconds=exc.retry_after)
            await jobs.defer(self.pool, job.thread_id, job.run_id, until)
            metrics.MEMORY_WRITES.labels("over_budget").inc()
            return
        worth = worth_writing(candidates)
        if worth is None:
            await jobs.discard(self.pool, job.thread_id, job.run_id)
            metrics.MEMORY_WRITES.labels("nothing").inc()
            return
        facts, updates = worth
        lease = await self.locks.wait_user(job.tenant_id, job.user_id, self.lock_wait)
        if lease is None:
            metrics.MEMORY_WRITES.labels("lock_timeout").inc()  # the row stays for a later claim
            return
        try:
            async with self.pool.connection() as conn:
                written = await self._write(conn, job, facts, updates)
            # Not written: erased, reset, its thread deleted, or done by another worker meanwhile.
            metrics.MEMORY_WRITES.labels("written" if written else "dropped_gone").inc()
        finally:
            await lease.release()

    async def _write(
        self, conn: AsyncConnection[Any], job: MemoryJob, facts: list[FactCandidate], updates: Profile
    ) -> bool:
        """Take the job and write what it found, in one transaction; False when the job was gone.

        Two round trips: `BEGIN`, the reset lock, the job's delete and the reads go out together;
        the writes and `COMMIT` follow in one flush (one more when a fact's history is trimmed).
        """
        profile_ns = profile_namespace(job.tenant_id, job.user_id)
        # What the plan reads, as before: the facts when there are facts, the profile when it changes.
        wanted = [items.Wanted(facts_namespace(job.tenant_id, job.user_id), limit=self.max_facts + 50)] * bool(facts)
        wanted += [items.Wanted(profile_ns, key=key) for key in (PROFILE_KEY, PROFILE_SOURCES_KEY) if updates]
        try:
            async with one_flush_transaction(conn):
                await hold_for_write(conn, job.tenant_id, job.user_id)
                taken = await queries.send_take_job(conn, job.thread_id, job.run_id)
                found = await items.read_together(conn, wanted, self.lifetime)
                if taken.rowcount <= 0:
                    raise _JobGone()
                existing = found.pop(0) if facts else []
                current, known = [rows[0] if rows else None for rows in found] if updates else [None, None]
                await self._apply(conn, job, facts, updates, existing, current, known)
        except _JobGone:
            return False
        return True

    async def _outcome(self, job: MemoryJob, fresh: bool) -> jobs.RunOutcome:
        """Return how the job's run ended, waiting a little for a fresh job's run to write its end."""
        if not fresh:
            return await jobs.run_outcome(self.pool, job)
        if job.ended is not None:
            # Its run tells how it ended, right after its final write: nothing to read.
            try:
                return await asyncio.wait_for(asyncio.shield(job.ended), sum(_SETTLE_WAITS))
            except TimeoutError:
                return "unfinished"
        # A fresh job is handed over before its run's final write, so a read at once would
        # almost always find the run unfinished: each read comes after a wait instead.
        outcome: jobs.RunOutcome = "unfinished"
        for wait in _SETTLE_WAITS:
            await asyncio.sleep(wait)
            outcome = await jobs.run_outcome(self.pool, job)
            if outcome != "unfinished":
                break
        return outcome

    async def _apply(
        self,
        conn: AsyncConnection[Any],
        job: MemoryJob,
        facts: list[FactCandidate],
        updates: Profile,
        existing: list[items.StoredItem],
        current: items.StoredItem | None,
        known: items.StoredItem | None,
    ) -> None:
        """Write the turn's facts and profile, from what was read (`existing` facts, the profile and its sources)."""
        profile_ns = profile_namespace(job.tenant_id, job.user_id)
        # Every fact this turn writes, new or merged into a stored one, names this run: the
        # run that wrote it last. Facts the plan leaves alone keep their own source.
        turn = FactSource(thread_id=job.thread_id, run_id=job.run_id)
        written = await self._apply_facts(conn, job, facts, turn, existing) if facts else []
        if not updates:
            return
        merged = merge_profile(stored_profile(current.value) if current else Profile(), updates)
        old_sources = profile_sources.stored_sources(known.value) if known else profile_sources.ProfileSources()
        sources = profile_sources.record(old_sources, updates, written, stored_source(turn), merged)
        puts: list[tuple[str, Mapping[str, object]]] = []
        if current is None or merged != current.value:
            puts.append((PROFILE_KEY, merged))
        if known is None or sources != known.value:
            puts.append((PROFILE_SOURCES_KEY, sources))
        await items.put(conn, profile_ns, puts, self.lifetime)

    async def _apply_facts(
        self,
        conn: AsyncConnection[Any],
        job: MemoryJob,
        facts: list[FactCandidate],
        turn: FactSource,
        existing: list[items.StoredItem],
    ) -> list[tuple[str, FactCandidate]]:
        """Write the turn's facts: consolidated, changed ones closing their old version; return what was written.

        `existing` is the user's stored facts, read with the job's claim in one flush.
        """
        facts_ns = facts_namespace(job.tenant_id, job.user_id)
        parsed = {item.key: Fact.from_stored(item.value) for item in existing}
        stored = [
            StoredFact(
                item.key, parsed[item.key].text, parsed[item.key].category, parsed[item.key].key, item.updated_at
            )
            for item in existing
        ]
        facts, halves = split_values(stored, facts)
        plan = consolidate([f for f in stored if f.id not in halves], facts, max_facts=self.max_facts)
        await items.delete_keys(conn, facts_ns, [*halves, *plan.deletes])
        by_id = {item.key: item for item in existing}
        now = rfc3339(items.utcnow(), timespec="microseconds")
        closed = [
            closed_version(by_id[fact_id], parsed[fact_id], now, turn) for fact_id in plan.closes if fact_id in by_id
        ]
        puts: list[tuple[str, Mapping[str, object]]] = []
        for fact_id, fact in plan.puts:
            old = by_id.get(fact_id)
            # Believed since it was first written; a changed fact, since now.
            since = now if old is None or fact_id in plan.closes else parsed[fact_id].believed_since(old.created_at)
            value = Fact(text=fact.text, category=fact.category, key=fact.key, source=turn, valid_from=since)
            puts.append((fact_id, value.stored()))
        await items.put(conn, facts_ns, puts, self.lifetime)
        if closed:
            await self._keep_history(conn, history_namespace(job.tenant_id, job.user_id), closed)
        return plan.puts

    async def _keep_history(
        self, conn: AsyncConnection[Any], history_ns: tuple[str, ...], closed: list[tuple[str, Mapping[str, object]]]
    ) -> None:
        """Add closed versions to the user's fact history, keeping its newest MAX_HISTORY."""
        await items.put(conn, history_ns, closed, self.lifetime)
        kept = await items.read(conn, history_ns, MAX_HISTORY + len(closed), self.lifetime)
        await items.delete_keys(conn, history_ns, [item.key for item in kept[MAX_HISTORY:]])


class _JobGone(Exception):
    """The job's row was gone when the writer came to take it: nothing is written."""


def closed_version(item: items.StoredItem, fact: Fact, now: str, turn: FactSource) -> tuple[str, Mapping[str, object]]:
    """Return the history entry (key, value) of a stored fact a later one of the same kind replaced."""
    return uuid.uuid4().hex, fact.closed(item.key, item.created_at, now, turn).stored()


def split_values(stored: list[StoredFact], facts: list[FactCandidate]) -> tuple[list[FactCandidate], list[str]]:
    """Drop new facts that complete a refused value with a recent fact; return the rest and the stored halves.

    A national ID, a card number or a health word split over two messages passes the guard
    in each; read with the user's most recent facts (and the turn's other facts) it does not.
    Both halves go: the new fact is not written and a stored half is deleted, so nothing of
    the value stays.
    """
    recent = sorted(stored, key=lambda f: f.updated_at)[-RECENT_FACTS_READ_TOGETHER:]
    partners: list[tuple[str | None, str]] = [(f.id, f.text) for f in recent]
    kept: list[FactCandidate | None] = []
    halves: list[str] = []
    for fact in facts:
        for index, (partner_id, partner_text) in enumerate(partners):
            reason = joined_rejection_reason(partner_text, fact.text) if partner_text else None
            if reason is None:
                continue
            metrics.PII_REJECTED.labels(str(reason)).inc()
            if partner_id is not None:
                halves.append(partner_id)
            else:
                kept[index - len(recent)] = None
            partners[index] = (partner_id, "")  # a half already gone completes nothing more
            break
        else:
            kept.append(fact)
            partners.append((None, fact.text))
            continue
        kept.append(None)
        partners.append((None, ""))
    return [f for f in kept if f is not None], halves


def worth_writing(candidates: MemoryCandidates, *, count: bool = True) -> tuple[list[FactCandidate], Profile] | None:
    """Return the facts and profile updates that pass the instruction and PII guards, or None when nothing does.

    `count` counts what the guard drops (never logged with its value); off for a look ahead.
    """
    if count:
        for category in candidates.rejected:  # dropped by the extractor's own guard
            metrics.PII_REJECTED.labels(str(category)).inc()
        for kind in candidates.instructions:  # refused by the extractor as instructions
            metrics.INSTRUCTIONS_REFUSED.labels(str(kind)).inc()
    facts = []
    for fact in candidates.facts:
        # Again here, in front of the store: a custom extractor may not have asked.
        instruction = instruction_kind(fact.text)
        if instruction is not None:
            if count:
                metrics.INSTRUCTIONS_REFUSED.labels(str(instruction)).inc()
            continue
        reason = rejection_reason(fact.text, category=fact.category)
        if reason is not None:
            if count:
                metrics.PII_REJECTED.labels(str(reason)).inc()
            continue
        facts.append(fact)
    updates = _safe_profile_updates(candidates.profile_updates)
    return (facts, updates) if facts or updates else None


def _safe_profile_updates(updates: Profile) -> Profile:
    # Free-text profile entries (household) go through the same guard as facts.
    safe = updates.copy()
    household = [h for h in safe.get("household", []) if rejection_reason(str(h)) is None]
    if "household" in safe:
        safe["household"] = household
    return safe
