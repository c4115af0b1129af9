"""The memory writer: answered turns become profile updates and facts, after the answer.

Memory work must delay neither `end` nor the user's next message, so it runs here, outside
the thread's lock, in a queue per user: two threads of one user never race a
consolidation. Across replicas the same is guaranteed by the user's advisory lock, which
erasure takes too; a job whose thread was erased meanwhile drops itself, so nothing of
an erased user lands afterwards. A job's reads and writes run in one transaction that
first checks the user's last memory reset (memory/resets.py): work submitted before a
reset, on any replica, never lands after it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.store.base import GetOp, Item, PutOp, SearchOp, TTLConfig
from langgraph.store.postgres.aio import AsyncPostgresStore

from chatbot import metrics
from chatbot.db import langgraph_tables
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool
from chatbot.memory.consolidation import StoredFact, consolidate
from chatbot.memory.extraction import FactCandidate, MemoryCandidates, extract_offline, merge_profile
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.namespaces import PROFILE_KEY, facts_namespace, profile_namespace
from chatbot.memory.pii import rejection_reason
from chatbot.memory.resets import hold_for_write

log = logging.getLogger(__name__)

Extractor = Callable[[MemoryJob], Awaitable[MemoryCandidates]]


async def offline_extractor(job: MemoryJob) -> MemoryCandidates:
    """Extract with the deterministic offline rules (once: the graph may have run them already)."""
    if job.offline_candidates is not None:
        return job.offline_candidates
    return extract_offline(job.user_text, locale=job.locale)


class MemoryWriter:
    """Per-user queues of memory jobs, worked off in the background."""

    def __init__(
        self,
        *,
        pool: Pool,
        locks: Locks,
        max_facts: int,
        extractor: Extractor = offline_extractor,
        lock_wait: float = 30.0,
        ttl: TTLConfig | None = None,
    ) -> None:
        self.pool = pool
        self.locks = locks
        self.max_facts = max_facts
        self.extractor = extractor
        self.lock_wait = lock_wait
        self.ttl = ttl
        # Jobs with the monotonic time they were submitted at (memory/resets.py).
        self._queues: dict[tuple[str, str], deque[tuple[MemoryJob, float]]] = {}
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}

    def submit(self, job: MemoryJob) -> None:
        """Queue a job; returns at once."""
        key = (job.tenant_id, job.user_id)
        self._queues.setdefault(key, deque()).append((job, time.monotonic()))
        if key not in self._workers:
            task = asyncio.create_task(self._work(key), name=f"memory-{job.tenant_id}")
            self._workers[key] = task

    def forget(self, tenant_id: str, user_id: str) -> None:
        """Drop the user's queued jobs (erasure or reset was asked)."""
        queue = self._queues.get((tenant_id, user_id))
        if queue:
            queue.clear()

    async def drain(self, timeout: float) -> None:
        """Finish queued work (graceful shutdown), up to `timeout` seconds."""
        if self._workers:
            await asyncio.wait(set(self._workers.values()), timeout=timeout)

    async def _work(self, key: tuple[str, str]) -> None:
        queue = self._queues[key]
        try:
            while queue:
                job, submitted = queue.popleft()
                try:
                    await self._process(job, submitted)
                except Exception as exc:
                    metrics.MEMORY_WRITES.labels("failed").inc()
                    log.warning("memory job failed", extra={"run_id": job.run_id, "error": type(exc).__name__})
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def _process(self, job: MemoryJob, submitted: float) -> None:
        worth = _worth_writing(await self.extractor(job))
        if worth is None:
            # A turn that holds nothing to remember costs no lock, connection or transaction
            # (it used to pay five statements here to find that out).
            metrics.MEMORY_WRITES.labels("nothing").inc()
            return
        facts, updates = worth
        lease = await self.locks.wait_user(job.tenant_id, job.user_id, self.lock_wait)
        if lease is None:
            metrics.MEMORY_WRITES.labels("lock_timeout").inc()
            return
        try:
            if not await self._thread_still_there(job):
                metrics.MEMORY_WRITES.labels("dropped_erased").inc()
                return
            async with self.pool.connection() as conn, conn.transaction():
                since_reset = await hold_for_write(conn, job.tenant_id, job.user_id)
                if since_reset is not None and since_reset < time.monotonic() - submitted:
                    metrics.MEMORY_WRITES.labels("dropped_reset").inc()
                    return
                # A store on this transaction's connection: the reads, deletes and puts
                # below commit together with the reset check, or not at all.
                await self._apply(AsyncPostgresStore(conn, ttl=self.ttl), job, facts, updates)
            metrics.MEMORY_WRITES.labels("written").inc()
        finally:
            await lease.release()

    async def _thread_still_there(self, job: MemoryJob) -> bool:
        async with self.pool.connection() as conn:
            return await langgraph_tables.thread_recorded_for(conn, job.thread_id, job.tenant_id, job.user_id)

    async def _apply(
        self, store: AsyncPostgresStore, job: MemoryJob, facts: list[FactCandidate], updates: dict[str, Any]
    ) -> None:
        profile_ns = profile_namespace(job.tenant_id, job.user_id)
        facts_ns = facts_namespace(job.tenant_id, job.user_id)
        # `abatch` runs on the store's own connection (this transaction); its `aget`-style
        # helpers would go through a background queue instead. Reads refresh the TTL, and
        # every put carries the default TTL, as the store's own helpers would.
        ttl = (self.ttl or {}).get("default_ttl")
        current, existing = await store.abatch(
            [
                GetOp(profile_ns, PROFILE_KEY, refresh_ttl=True),
                SearchOp(facts_ns, limit=self.max_facts + 50, refresh_ttl=True),
            ]
        )
        ops: list[PutOp] = []
        if updates:
            profile = current if isinstance(current, Item) else None
            merged = merge_profile(dict(profile.value) if profile else {}, updates)
            if not profile or merged != profile.value:
                ops.append(PutOp(profile_ns, PROFILE_KEY, merged, index=False, ttl=ttl))
        if facts:
            stored = [
                StoredFact(
                    id=item.key,
                    text=str(item.value.get("text", "")),
                    category=str(item.value.get("category", "general")),
                    key=str(item.value.get("key", "")),
                    updated_at=item.updated_at,
                )
                for item in (existing if isinstance(existing, list) else [])
                if isinstance(item, Item)
            ]
            plan = consolidate(stored, facts, max_facts=self.max_facts)
            ops.extend(PutOp(facts_ns, fact_id, None) for fact_id in plan.deletes)
            for fact_id, fact in plan.puts:
                value: dict[str, Any] = {"text": fact.text, "category": fact.category, "key": fact.key}
                ops.append(PutOp(facts_ns, fact_id, value, index=False, ttl=ttl))
        if ops:
            await store.abatch(ops)


def _worth_writing(candidates: MemoryCandidates) -> tuple[list[FactCandidate], dict[str, Any]] | None:
    """Return the facts and profile updates that pass the PII guard, or None when nothing does."""
    for category in candidates.rejected:  # dropped by the extractor's own guard
        metrics.PII_REJECTED.labels(str(category)).inc()
    facts = []
    for fact in candidates.facts:
        reason = rejection_reason(fact.text, category=fact.category)
        if reason is not None:
            metrics.PII_REJECTED.labels(str(reason)).inc()  # counted, never logged with its value
            continue
        facts.append(fact)
    updates = _safe_profile_updates(candidates.profile_updates)
    return (facts, updates) if facts or updates else None


def _safe_profile_updates(updates: dict[str, Any]) -> dict[str, Any]:
    # Free-text profile entries (household) go through the same guard as facts.
    safe = dict(updates)
    household = [h for h in safe.get("household", []) if rejection_reason(str(h)) is None]
    if "household" in safe:
        safe["household"] = household
    return safe
