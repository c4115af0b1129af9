"""HTTP endpoints of threads: runs (this module), messages, deletion and feedback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from chatbot.auth import CallerDep
from chatbot.errors import PROBLEM_JSON
from chatbot.threads.runs import Run, RunService
from chatbot.threads.schemas import RunRequest, ThreadId
from chatbot.threads.sse import SSE_MEDIA_TYPE, encode_events, wants_json

router = APIRouter(prefix="/v1/threads", tags=["threads"])


def run_service(request: Request) -> RunService:
    """Return the app's run service."""
    return request.app.state.runs


RunsDep = Annotated[RunService, Depends(run_service)]


@router.post("/{thread_id}/runs", response_model=None)
async def create_run(
    thread_id: ThreadId,
    body: RunRequest,
    caller: CallerDep,
    runs: RunsDep,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Run the graph on the user's message; stream it (SSE) or answer with its `end` object."""
    run = await runs.start(thread_id, caller, body.message.content)
    if wants_json(accept):
        result = await run.result()
        if result.event == "end":
            return JSONResponse(result.data)
        return JSONResponse(result.data, status_code=result.data["status"], media_type=PROBLEM_JSON)
    return StreamingResponse(
        _sse(run),
        media_type=SSE_MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _sse(run: Run) -> AsyncIterator[bytes]:
    # If the client goes away this generator is cancelled; the run's own task goes on
    # and persists the turn, and its lock is released when it ends.
    async for batch in run.stream():
        yield encode_events(batch)
