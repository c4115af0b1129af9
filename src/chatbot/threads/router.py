"""HTTP endpoints of runs: start one (this module's POST) and rejoin its stream."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from chatbot.auth import CallerDep
from chatbot.errors import PROBLEM_JSON, Problem
from chatbot.threads.ownership import check_thread_access
from chatbot.threads.rejoin import RunRecords, follower_listener, parse_last_event_id, replay_listener
from chatbot.threads.runs import RunService
from chatbot.threads.schemas import RunRequest, ThreadId
from chatbot.threads.sse import SSE_MEDIA_TYPE, sse_body, wants_json
from chatbot.threads.stream import Listener

router = APIRouter(prefix="/v1/threads", tags=["threads"])


def run_service(request: Request) -> RunService:
    """Return the app's run service."""
    return request.app.state.runs


def run_records(request: Request) -> RunRecords:
    """Return the reader of runs' records."""
    return request.app.state.run_records


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """How streams pace their output: keep-alive comments and token flushes, in seconds."""

    keepalive: float
    flush: float


def stream_timing(request: Request) -> StreamTiming:
    """Return the streams' pacing from the settings."""
    settings = request.app.state.settings
    return StreamTiming(settings.sse_keepalive_seconds, settings.sse_flush_ms / 1000)


RunsDep = Annotated[RunService, Depends(run_service)]
RecordsDep = Annotated[RunRecords, Depends(run_records)]
TimingDep = Annotated[StreamTiming, Depends(stream_timing)]


def stream_location(thread_id: str, run_id: str) -> str:
    """Return where a run's stream can be rejoined."""
    return f"/v1/threads/{thread_id}/runs/{run_id}/stream"


def _sse_response(
    listener: Listener, timing: StreamTiming, on_close: Callable[[], object] | None = None
) -> StreamingResponse:
    return StreamingResponse(
        sse_body(listener, timing.keepalive, timing.flush, on_close),
        media_type=SSE_MEDIA_TYPE,
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            "Location": stream_location(listener.thread_id, listener.run_id),
        },
    )


@router.post("/{thread_id}/runs", response_model=None)
async def create_run(
    thread_id: ThreadId,
    body: RunRequest,
    caller: CallerDep,
    runs: RunsDep,
    timing: TimingDep,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Run the graph on the user's message; stream it (SSE) or answer with its `end` object."""
    listener = await runs.start(thread_id, caller, body.message.content)
    if wants_json(accept):
        result = await listener.terminal()
        location = {"Location": stream_location(thread_id, listener.run_id)}
        if result.event == "end":
            return JSONResponse(result.data, headers=location)
        return JSONResponse(result.data, status_code=result.data["status"], media_type=PROBLEM_JSON, headers=location)
    return _sse_response(listener, timing)


@router.get("/{thread_id}/runs/{run_id}/stream", response_model=None)
async def rejoin_run(
    thread_id: ThreadId,
    run_id: Annotated[str, Path(max_length=64)],
    caller: CallerDep,
    runs: RunsDep,
    records: RecordsDep,
    timing: TimingDep,
    last_event_id: Annotated[str | None, Header(max_length=200)] = None,
) -> Response:
    """Rejoin a run's stream from the offset of `Last-Event-ID`: live, followed, or replayed."""
    await check_thread_access(records.pool, thread_id, caller, must_exist=True)
    try:
        run_id = str(uuid.UUID(run_id))
    except ValueError:
        raise Problem(404, "run not found on this thread") from None
    delivered = parse_last_event_id(last_event_id, run_id)
    local = runs.local(thread_id, run_id)
    if local is not None:
        listener = local.listen(delivered)
        return _sse_response(listener, timing, lambda: local.leave(listener))
    replayed = await records.replay(thread_id, run_id)
    if replayed is not None:
        return _sse_response(replay_listener(run_id, thread_id, delivered, replayed), timing)
    if not await records.exists(thread_id, run_id):
        raise Problem(404, "run not found on this thread")
    listener, feeder = follower_listener(records, run_id, thread_id, delivered)
    return _sse_response(listener, timing, feeder.cancel)
