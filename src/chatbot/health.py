"""Liveness, readiness and metrics: the endpoints that need no token."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from chatbot import metrics as service_metrics
from chatbot import openapi_examples as examples
from chatbot.db.migrate import schema_problem
from chatbot.deps import PoolDep
from chatbot.errors import PROBLEM_JSON, problem_response
from chatbot.openapi import PROBLEM_SCHEMA

router = APIRouter(tags=["operations"])

_NOT_READY = {
    "description": "Postgres does not answer within 3 seconds, or the schema is not migrated (`chatbot migrate`).",
    "content": {PROBLEM_JSON: {"schema": PROBLEM_SCHEMA, "example": examples.NOT_READY}},
}


@router.get(
    "/healthz",
    summary="Liveness",
    responses={200: {"content": {"application/json": {"examples": examples.HEALTHZ}}}},
)
async def healthz() -> dict[str, str]:
    """Answer that the process is alive, without any I/O."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=None,
    summary="Readiness",
    responses={
        200: {
            "content": {
                "application/json": {
                    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
                    "examples": examples.READYZ,
                }
            }
        },
        503: _NOT_READY,
    },
)
async def readyz(pool: PoolDep) -> Response | dict[str, str]:
    """Answer 200 when Postgres answers and the schema is migrated, else 503."""
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


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics",
    responses={
        200: {
            "description": "The Prometheus text exposition format.",
            "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}, "example": examples.METRICS}},
        }
    },
)
async def metrics() -> Response:
    """Serve the Prometheus text exposition (summed over the replica's worker processes)."""
    return Response(service_metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
