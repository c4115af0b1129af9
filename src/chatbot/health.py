"""Liveness, readiness and metrics: the endpoints that need no token."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from chatbot import metrics as service_metrics
from chatbot.db.migrate import schema_problem
from chatbot.errors import problem_response

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    """Answer that the process is alive, without any I/O."""
    return {"status": "ok"}


@router.get("/readyz", include_in_schema=False, response_model=None)
async def readyz(request: Request) -> Response | dict[str, str]:
    """Answer 200 when Postgres answers and the schema is migrated, else 503."""
    pool = request.app.state.pool
    try:
        async with asyncio.timeout(3):
            async with pool.connection() as conn:
                problem = await schema_problem(conn)
    except Exception:
        return problem_response(503, "database unreachable", title="Not Ready")
    if problem:
        return problem_response(
            503, f"database schema is not migrated ({problem}): run `chatbot migrate`", title="Not Ready"
        )
    return {"status": "ready"}


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    """Serve the Prometheus text exposition (summed over the replica's worker processes)."""
    return Response(service_metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
