"""What a replica runs on: every long-lived service, built by one function and opened as one.

`build_services(settings, ...)` makes them (nothing connects yet); `Services.running()`
opens the pool and the lock sessions, starts the background work (cancel listener,
memory pickup, retention and TTL sweeps) and, on the way out, stops it, drains runs and
memory work and closes what it opened. The app's lifespan does only that and keeps the
object on `app.state.services`, where the routers' dependencies read it (`chatbot.deps`,
`threads/deps.py`, `memory/deps.py`: each names the part it needs as a protocol, which
`Services` satisfies; mypy checks that below).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields, replace
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from langgraph.store.postgres.aio import AsyncPostgresStore

from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.early import start_early_reads
from chatbot.agent.graph import build_graph
from chatbot.agent.modelcall import answer_input_bound
from chatbot.budgets.service import Budgets
from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import Pool, connection_kwargs, make_pool, resolve_database_url
from chatbot.db.saver import FencedPostgresSaver
from chatbot.deps import Infrastructure
from chatbot.memory.deps import MemoryServices
from chatbot.memory.model_extraction import model_extractor, model_might_write
from chatbot.memory.read import memory_reader
from chatbot.memory.ttl import memory_ttl, start_memory_sweeper
from chatbot.memory.writer import Extractor, MemoryWriter, offline_extractor
from chatbot.models.chain import Models
from chatbot.models.offline import OFFLINE_CANDIDATES
from chatbot.models.prices import parse_prices
from chatbot.ops.sweeper import BudgetSweeper, RetentionSweeper
from chatbot.recall.service import ThreadRecall
from chatbot.retrieval.embeddings import load_embeddings
from chatbot.retrieval.retriever import KnowledgeRetriever
from chatbot.threads.cancel import CancelListener
from chatbot.threads.deps import ThreadServices
from chatbot.threads.ratelimit import RateLimiter
from chatbot.threads.record import SystemPromptsTable
from chatbot.threads.rejoin import RunReplays
from chatbot.threads.runs import RunService
from chatbot.tracing.service import Tracing


@dataclass(kw_only=True)
class Services:
    """The replica's long-lived services, as the lifespan built them."""

    settings: Settings
    pool: Pool
    locks: Locks
    """Every thread and user lock of the replica, on a few sessions of their own (db/locks.py):
    at most pool_max_size + lock_connections connections, whatever is in flight."""
    saver: FencedPostgresSaver
    store: AsyncPostgresStore
    retriever: KnowledgeRetriever
    graph: CompiledStateGraph[Any, Any, Any, Any]
    memory: MemoryWriter
    runs: RunService
    run_replays: RunReplays
    cancels: CancelListener
    """Cancels decided on any replica reach the run's own: one LISTEN session, on the lock
    URL (a session feature), counted in the connection budget (config.py)."""
    retention: RetentionSweeper | None
    """The retention sweep, when CHATBOT_RETENTION_DAYS is set."""
    budget_sweep: BudgetSweeper
    """Deletes expired budget holds (a killed process's), one replica at a time."""
    tracing: Tracing
    budgets: Budgets
    """Spending caps checked before every model call (budgets/service.py)."""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Services]:
        """Open, start the background work, and on exit stop, drain and close, in that order."""
        settings = self.settings
        try:
            # wait=False: a replica whose database is down still starts, answers /healthz and
            # reports 503 on /readyz until Postgres is back.
            await self.pool.open(wait=False)
            await self.locks.open()
            self.cancels.start()
            if self.retention is not None:
                self.retention.start()
            self.budget_sweep.start()
            # The store's TTL sweeper, when CHATBOT_MEMORY_TTL_DAYS is set.
            await start_memory_sweeper(self.store, settings.memory_ttl_sweep_minutes)
            self.memory.start()  # picks up memory jobs a killed replica left
            yield self
            await self.memory.stop()
            if self.retention is not None:
                await self.retention.stop()
            await self.budget_sweep.stop()
            await self.store.stop_ttl_sweeper(timeout=5)
            await self.runs.drain(settings.shutdown_grace_seconds)
            await self.memory.drain(settings.shutdown_grace_seconds)
        finally:
            await self.cancels.stop()
            await self.locks.close()
            await self.budgets.close()  # what drained runs did not settle is released, not left to expire
            await self.pool.close()
            # After the drain, so the last runs' spans go too; in a thread: an unreachable
            # collector can hold the final export for the exporter's timeout.
            await asyncio.to_thread(self.tracing.shutdown)


async def build_services(
    settings: Settings,
    *,
    models: Models,
    tracing: Tracing,
    agent_overrides: dict[str, Any] | None = None,
    memory_extractor: Extractor | None = None,
) -> Services:
    """Build every service of a replica from its settings; nothing is opened or started."""
    conninfo = await resolve_database_url(settings)
    session_url = settings.lock_database_url or conninfo
    pool = make_pool(conninfo, settings, name="main", min_size=settings.pool_min_size, max_size=settings.pool_max_size)
    locks = Locks(session_url, connection_kwargs(settings), sessions=settings.lock_connections)
    saver = FencedPostgresSaver(pool)
    budgets = Budgets(
        pool,
        prices=parse_prices(settings.model_prices),  # a malformed value fails the start, named
        output_cap=settings.model_max_output_tokens,
        reservation_seconds=settings.budget_reservation_seconds,
        answer_input_bound=answer_input_bound(models.answer[0].spec, settings.context_tokens) if models.answer else 0,
    )
    store = AsyncPostgresStore(pool, ttl=memory_ttl(settings.memory_ttl_days))
    memory = MemoryWriter(
        pool=pool,
        locks=locks,
        max_facts=settings.memory_max_facts,
        extractor=memory_extractor or _memory_extractor(settings, models, pool, budgets),
        ttl=store.ttl_config,
        lease_seconds=settings.memory_job_lease_seconds,
        poll_seconds=settings.memory_job_poll_seconds,
        might_write=model_might_write if memory_extractor is None and models.memory is not None else None,
    )
    retriever = KnowledgeRetriever(
        pool,
        settings.model_first_token_timeout_seconds,
        embeddings=load_embeddings(settings.embeddings),
        # Enough for the offline responder to pick its section from (models/offline.py); the
        # graph gives a model the first MODEL_CHUNKS of them (agent/nodes.py).
        k=OFFLINE_CANDIDATES,
    )
    recall = ThreadRecall(
        pool,
        embeddings=retriever.embeddings,
        embeddings_timeout=settings.model_first_token_timeout_seconds,
    )
    collaborators = AgentDeps(
        settings=settings,
        retriever=retriever,
        chain=tuple(models.answer),
        summary_model=models.summary,
        memory_sink=memory.submit,
        memory_reader=memory_reader(pool, max_facts=settings.memory_max_facts, lifetime=memory.lifetime),
        prompt_registry=SystemPromptsTable(pool),
        budgets=budgets,
        recall=recall,
    )
    deps = _overridden(collaborators, agent_overrides)
    graph = build_graph(deps).compile(checkpointer=saver, store=store)
    runs = RunService(
        pool=pool,
        locks=locks,
        graph=graph,
        limiter=RateLimiter(pool, settings.rate_limit_per_minute),
        max_in_flight=settings.max_runs_in_flight,
        tracing=tracing,
        model=settings.model,
        budgets=budgets,
        answer_models=tuple(entry.spec for entry in models.answer),
        context_tokens=settings.context_tokens,
        early_reads=functools.partial(start_early_reads, deps),
    )
    retention = None
    if settings.retention_days > 0:
        retention = RetentionSweeper(
            pool=pool, locks=locks, days=settings.retention_days, interval_minutes=settings.retention_sweep_minutes
        )
    return Services(
        settings=settings,
        pool=pool,
        locks=locks,
        saver=saver,
        run_replays=RunReplays(pool),
        store=store,
        retriever=retriever,
        graph=graph,
        runs=runs,
        cancels=CancelListener(session_url, connection_kwargs(settings), runs.cancel_local),
        memory=memory,
        retention=retention,
        # Read through `budgets`: a test that moves the budgets' clock moves the sweep's too.
        budget_sweep=BudgetSweeper(
            pool=pool, interval_seconds=settings.budget_sweep_seconds, clock=lambda: budgets.clock()
        ),
        tracing=tracing,
        budgets=budgets,
    )


def _memory_extractor(settings: Settings, models: Models, pool: Pool, budgets: Budgets) -> Extractor:
    if models.memory is None:
        return offline_extractor
    return model_extractor(
        models.memory.model,
        # Memory work runs after the answer: it may take a model's whole first-token bound.
        timeout=settings.model_first_token_timeout_seconds,
        name=models.memory.spec,
        pool=pool,
        budgets=budgets,
    )


def _overridden(collaborators: AgentDeps, overrides: dict[str, Any] | None) -> AgentDeps:
    """Apply `create_app`'s `agent_overrides` to the graph's collaborators."""
    if not overrides:
        return collaborators
    # Keys named like a setting change the graph's copy of the settings only (say a short
    # model timeout that must not also bound retrieval); the rest replace collaborators. A
    # collaborator named like a setting (`summary_model`: the model, beside its spec) is the
    # collaborator: else a test's summary model would be dropped into the settings unused.
    collaborator_names = {f.name for f in fields(AgentDeps)}
    tuned = {k: v for k, v in overrides.items() if k in Settings.model_fields and k not in collaborator_names}
    others = {k: v for k, v in overrides.items() if k not in tuned}
    return replace(collaborators, settings=collaborators.settings.model_copy(update=tuned), **others)


def _satisfies_every_dependency(services: Services) -> tuple[Infrastructure, ThreadServices, MemoryServices]:
    """Never called: mypy checks here that `Services` has what each feature's dependencies read."""
    return services, services, services
