"""The FastAPI application and its lifespan: pools, saver, store, graph, runs, memory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from fastapi import FastAPI
from langgraph.store.postgres.aio import AsyncPostgresStore

from chatbot import openapi
from chatbot.agent.deps import AgentDeps
from chatbot.agent.graph import build_graph
from chatbot.auth import ServiceAuthMiddleware, TokenVerifier
from chatbot.caller import CallerContext
from chatbot.config import Settings
from chatbot.db.locks import Locks
from chatbot.db.pool import connection_kwargs, make_pool, resolve_database_url
from chatbot.db.saver import FencedPostgresSaver
from chatbot.errors import install_problem_handlers
from chatbot.health import router as health_router
from chatbot.limits import BodySizeLimitMiddleware
from chatbot.memory.model_extraction import model_extractor, model_might_write
from chatbot.memory.read import memory_reader
from chatbot.memory.router import router as memory_router
from chatbot.memory.ttl import memory_ttl, start_memory_sweeper
from chatbot.memory.writer import Extractor, MemoryWriter, offline_extractor
from chatbot.models.chain import load_models
from chatbot.ops.router import router as users_router
from chatbot.ops.sweeper import RetentionSweeper
from chatbot.retrieval.embeddings import load_embeddings
from chatbot.retrieval.search import search_knowledge
from chatbot.threads.cancel import CancelListener
from chatbot.threads.ratelimit import RateLimiter
from chatbot.threads.record import SystemPromptsTable
from chatbot.threads.record_router import router as record_router
from chatbot.threads.rejoin import RunRecords
from chatbot.threads.router import router as threads_router
from chatbot.threads.runs import RunService
from chatbot.threads.transcript_router import router as transcript_router
from chatbot.tracing import tracing_for

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    *,
    agent_overrides: dict[str, Any] | None = None,
    memory_extractor: Extractor | None = None,
    tracer_provider: Any = None,
) -> FastAPI:
    """Build the application; nothing touches the database until the lifespan starts.

    `agent_overrides` replaces collaborators of the graph's `AgentDeps`, or settings as the
    graph alone sees them (keys named like a `Settings` field), and `memory_extractor`
    the memory writer's extractor (tests use them for failing or slow collaborators, or to
    observe the model window). `tracer_provider`, an OpenTelemetry SDK TracerProvider,
    traces runs into it whatever `CHATBOT_TRACING` says; its owner shuts it down.
    """
    settings = settings or Settings()
    # Loaded here, not in the lifespan: a missing provider extra fails at start-up, loudly.
    models = load_models(settings)
    # Also here: CHATBOT_TRACING=otlp without the `tracing` extra fails at start-up.
    tracing = tracing_for(settings.tracing, tracer_provider=tracer_provider)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        conninfo = await resolve_database_url(settings)
        pool = make_pool(
            conninfo,
            settings,
            name="main",
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
        )
        # Every thread and user lock of the replica, on a few sessions of their own (db/locks.py):
        # at most pool_max_size + lock_connections connections, whatever is in flight.
        locks = Locks(
            settings.lock_database_url or conninfo, connection_kwargs(settings), sessions=settings.lock_connections
        )
        # wait=False: a replica whose database is down still starts, answers /healthz and
        # reports 503 on /readyz until Postgres is back.
        await pool.open(wait=False)
        await locks.open()
        try:
            saver = FencedPostgresSaver(pool)
            store = AsyncPostgresStore(pool, ttl=memory_ttl(settings.memory_ttl_days))
            extractor = memory_extractor or (
                offline_extractor
                if models.memory is None
                else model_extractor(
                    models.memory.model,
                    # Memory work runs after the answer: it may take a model's whole first-token bound.
                    timeout=settings.model_first_token_timeout_seconds,
                    name=models.memory.spec,
                    pool=pool,
                )
            )
            memory = MemoryWriter(
                pool=pool,
                locks=locks,
                max_facts=settings.memory_max_facts,
                extractor=extractor,
                ttl=store.ttl_config,
                lease_seconds=settings.memory_job_lease_seconds,
                poll_seconds=settings.memory_job_poll_seconds,
                might_write=model_might_write if memory_extractor is None and models.memory is not None else None,
            )
            embeddings = load_embeddings(settings.embeddings)

            async def retriever(caller: CallerContext, query: str) -> list[dict[str, Any]]:
                # Bounded like a model's first token: an embeddings provider can hang too.
                async with asyncio.timeout(settings.model_first_token_timeout_seconds):
                    found = await search_knowledge(pool, caller, query, embeddings=embeddings)
                return [c.to_state() for c in found]

            deps = AgentDeps(
                settings=settings,
                retriever=retriever,
                chain=tuple(models.answer),
                summary_model=models.summary,
                memory_sink=memory.submit,
                memory_reader=memory_reader(pool, max_facts=settings.memory_max_facts, lifetime=memory.lifetime),
                prompt_registry=SystemPromptsTable(pool),
            )
            if agent_overrides:
                # Keys named like a setting change the graph's copy of the settings only (say a
                # short model timeout that must not also bound retrieval); the rest replace
                # collaborators.
                tuned = {k: v for k, v in agent_overrides.items() if k in Settings.model_fields}
                others = {k: v for k, v in agent_overrides.items() if k not in tuned}
                deps = replace(deps, settings=settings.model_copy(update=tuned), **others)
            graph = build_graph(deps).compile(checkpointer=saver, store=store)
            app.state.pool, app.state.locks = pool, locks
            app.state.saver, app.state.store, app.state.graph = saver, store, graph
            app.state.memory = memory
            app.state.runs = RunService(
                pool=pool,
                locks=locks,
                graph=graph,
                limiter=RateLimiter(pool, settings.rate_limit_per_minute),
                max_in_flight=settings.max_runs_in_flight,
                tracing=tracing,
                model=settings.model,
            )
            # Cancels decided on any replica reach the run's own: one LISTEN session, on the
            # lock URL (a session feature), counted in the connection budget (config.py).
            app.state.cancels = CancelListener(
                settings.lock_database_url or conninfo, connection_kwargs(settings), app.state.runs.cancel_local
            )
            app.state.cancels.start()
            app.state.run_records = RunRecords(pool, saver.serde)
            # Lifecycle: the retention sweep (when CHATBOT_RETENTION_DAYS is set) and the
            # store's TTL sweeper (when CHATBOT_MEMORY_TTL_DAYS is), both in the background.
            app.state.retention = None
            if settings.retention_days > 0:
                app.state.retention = RetentionSweeper(
                    pool=pool,
                    locks=locks,
                    days=settings.retention_days,
                    interval_minutes=settings.retention_sweep_minutes,
                )
                app.state.retention.start()
            await start_memory_sweeper(store, settings.memory_ttl_sweep_minutes)
            memory.start()  # picks up memory jobs a killed replica left
            yield
            await memory.stop()
            if app.state.retention is not None:
                await app.state.retention.stop()
            await store.stop_ttl_sweeper(timeout=5)
            await app.state.runs.drain(settings.shutdown_grace_seconds)
            await memory.drain(settings.shutdown_grace_seconds)
        finally:
            if getattr(app.state, "cancels", None) is not None:
                await app.state.cancels.stop()
            await locks.close()
            await pool.close()
            # After the drain, so the last runs' spans go too; in a thread: an unreachable
            # collector can hold the final export for the exporter's timeout.
            await asyncio.to_thread(tracing.shutdown)

    app = FastAPI(
        title="Insurance chatbot agent service",
        version="0.1.0",
        lifespan=lifespan,
        summary="The conversational agent behind the insurance support chatbot, for the main backend.",
        description=openapi.DESCRIPTION,
        openapi_tags=openapi.TAGS,
    )
    app.state.settings = settings
    install_problem_handlers(app)
    app.include_router(health_router)
    app.include_router(threads_router)
    app.include_router(transcript_router)
    app.include_router(memory_router)
    app.include_router(users_router)
    app.include_router(record_router)
    # Outermost first: 413 before 401 before anything else (the contract's order).
    app.add_middleware(ServiceAuthMiddleware, verifier=TokenVerifier(settings))
    app.add_middleware(BodySizeLimitMiddleware, read_timeout=settings.request_read_timeout_seconds)
    return app
