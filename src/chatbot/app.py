"""The FastAPI application: its routers and middleware, and a lifespan that runs the replica's services."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from chatbot import openapi
from chatbot.auth import ServiceAuthMiddleware, TokenVerifier
from chatbot.config import Settings
from chatbot.errors import install_problem_handlers
from chatbot.health import router as health_router
from chatbot.limits import BodySizeLimitMiddleware
from chatbot.memory.router import router as memory_router
from chatbot.memory.writer import Extractor
from chatbot.models.chain import load_models
from chatbot.ops.router import router as users_router
from chatbot.services import build_services
from chatbot.threads.messages_router import router as messages_router
from chatbot.threads.router import router as threads_router
from chatbot.threads.runs_router import router as runs_router
from chatbot.tracing.service import tracing_for


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
        services = await build_services(
            settings,
            models=models,
            tracing=tracing,
            agent_overrides=agent_overrides,
            memory_extractor=memory_extractor,
        )
        app.state.services = services  # read by the routers' dependencies (chatbot.deps)
        async with services.running():
            yield

    app = FastAPI(
        title="Insurance chatbot agent service",
        version="0.1.0",
        lifespan=lifespan,
        summary="The conversational agent behind the insurance support chatbot, for the main backend.",
        description=openapi.DESCRIPTION,
        openapi_tags=openapi.TAGS,
    )
    install_problem_handlers(app)
    app.include_router(health_router)
    app.include_router(runs_router)
    app.include_router(messages_router)
    app.include_router(threads_router)
    app.include_router(memory_router)
    app.include_router(users_router)
    # Outermost first: 413 before 401 before anything else (the contract's order).
    app.add_middleware(ServiceAuthMiddleware, verifier=TokenVerifier(settings))
    app.add_middleware(BodySizeLimitMiddleware, read_timeout=settings.request_read_timeout_seconds)
    return app
