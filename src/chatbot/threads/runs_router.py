"""`/v1/threads/{thread_id}/runs`: start a run, rejoin its stream, stop it, read its record, rate it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from chatbot import ids
from chatbot import openapi_examples as examples
from chatbot.auth import CallerDep
from chatbot.deps import AUTHENTICATED, LocksDep, PoolDep, SettingsDep
from chatbot.errors import PROBLEM_JSON, Problem
from chatbot.failures import Failure
from chatbot.json_body import StrictJsonRoute
from chatbot.openapi import SSE_MEDIA, SSE_SCHEMA, STREAM_HEADERS, json_answer, no_content, v1_problems
from chatbot.responses import RunEnd, RunRecord
from chatbot.threads._feedback import save_feedback
from chatbot.threads._ownership import check_thread_access
from chatbot.threads._sse import SSE_MEDIA_TYPE, sse_body, wants_json
from chatbot.threads._stream import Listener
from chatbot.threads.deps import ReplaysDep, RunsDep
from chatbot.threads.record import read_run_record
from chatbot.threads.rejoin import follower_listener, parse_last_event_id, replay_listener
from chatbot.threads.schemas import NOT_A_RUN, FeedbackRequest, RunId, RunRequest, ThreadId, run_not_found

# Bodies are read as strict UTF-8 JSON (json_body.py).
router = APIRouter(
    prefix="/v1/threads/{thread_id}/runs", tags=["threads"], dependencies=AUTHENTICATED, route_class=StrictJsonRoute
)


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """How streams pace their output: keep-alive comments and token flushes, in seconds."""

    keepalive: float
    flush: float


async def stream_timing(settings: SettingsDep) -> StreamTiming:
    """Return the streams' pacing from the settings."""
    return StreamTiming(settings.sse_keepalive_seconds, settings.sse_flush_ms / 1000)


TimingDep = Annotated[StreamTiming, Depends(stream_timing)]


def stream_location(thread_id: ids.ThreadId, run_id: ids.RunId) -> str:
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


_RUN_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The run: an event stream (the default), or its `end` object when `Accept` prefers JSON.",
        "model": RunEnd,
        "headers": STREAM_HEADERS,
        "content": {
            "application/json": {"examples": examples.RUN_END},
            SSE_MEDIA: {"schema": SSE_SCHEMA, "examples": examples.RUN_STREAM},
        },
    },
    **v1_problems(404, 409, 429, 502, 504),
}
_REJOIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The run's events from the `Last-Event-ID` offset on: `metadata`, the rest of the answer, "
        "then `end` (or `error`).",
        "headers": STREAM_HEADERS,
        "content": {SSE_MEDIA: {"schema": SSE_SCHEMA, "examples": examples.REJOIN_STREAM}},
    },
    **v1_problems(404),
}


@router.post(
    "",
    response_model=None,
    summary="Send the user's message: start a run",
    responses=_RUN_RESPONSES,
)
async def create_run(
    thread_id: ThreadId,
    body: Annotated[RunRequest, Body(openapi_examples=examples.RUN_REQUEST)],
    caller: CallerDep,
    runs: RunsDep,
    timing: TimingDep,
    accept: Annotated[
        str | None,
        Header(description="`text/event-stream` (the default, also `*/*`) or `application/json` to wait for `end`."),
    ] = None,
    traceparent: Annotated[
        str | None,
        Header(
            description="W3C trace context of the backend's request (optional): with tracing on, the run's span "
            "joins that trace. A malformed value is ignored."
        ),
    ] = None,
    tracestate: Annotated[str | None, Header(description="W3C `tracestate`, passed on with `traceparent`.")] = None,
) -> Response:
    """Run the graph on the user's message; stream it (SSE) or answer with its `end` object."""
    trace_parent = None
    if traceparent:
        trace_parent = {"traceparent": traceparent} | ({"tracestate": tracestate} if tracestate else {})
    listener = await runs.start(thread_id, caller, body.message.content, trace_parent)
    if wants_json(accept):
        result = await listener.terminal()
        location = {"Location": stream_location(thread_id, listener.run_id)}
        if result.event == "end":
            return JSONResponse(result.data, headers=location)
        failure = Failure.from_problem(result.data)
        return JSONResponse(
            result.data, status_code=failure.status, media_type=PROBLEM_JSON, headers=location | failure.headers()
        )
    return _sse_response(listener, timing)


@router.get(
    "/{run_id}/stream",
    response_model=None,
    response_class=StreamingResponse,
    summary="Rejoin a run's event stream",
    responses=_REJOIN_RESPONSES,
)
async def rejoin_run(
    thread_id: ThreadId,
    run_id: RunId,
    caller: CallerDep,
    runs: RunsDep,
    replays: ReplaysDep,
    timing: TimingDep,
    last_event_id: Annotated[
        str | None,
        Header(
            max_length=200,
            description="`<run_id>:<offset>`, the last event id received; the answer is sent "
            "from that offset on (from its start without the header).",
        ),
    ] = None,
) -> Response:
    """Rejoin a run's stream from the offset of `Last-Event-ID`: live, followed, or replayed."""
    await check_thread_access(replays.pool, thread_id, caller, must_exist=True)
    if run_id == NOT_A_RUN:
        raise run_not_found()
    delivered = parse_last_event_id(last_event_id, run_id)
    local = runs.local(thread_id, run_id)
    if local is not None:
        listener = local.listen(delivered)
        return _sse_response(listener, timing, lambda: local.leave(listener))
    replayed = await replays.replay(thread_id, run_id)
    if replayed is not None:
        return _sse_response(replay_listener(run_id, thread_id, delivered, replayed), timing)
    if not await replays.exists(thread_id, run_id):
        raise run_not_found()
    listener, feeder = follower_listener(replays, run_id, thread_id, delivered)
    return _sse_response(listener, timing, feeder.cancel)


@router.post(
    "/{run_id}/cancel",
    status_code=202,
    response_model=None,
    response_class=Response,
    summary='Stop a run in flight ("stop generating")',
    responses={
        202: {
            "description": "The run was in flight and is stopped: its stream (and every rejoin) ends with the "
            "`cancelled` error (409) and the thread is free again. Answered once the thread is free (within a "
            "second)."
        },
        **v1_problems(404, 409),
    },
)
async def cancel_run(
    thread_id: ThreadId, run_id: RunId, caller: CallerDep, runs: RunsDep, replays: ReplaysDep
) -> Response:
    """Stop the run's model call and end the run as `cancelled`, from any replica; 409 when it had already ended."""
    await check_thread_access(replays.pool, thread_id, caller, must_exist=True)
    if run_id == NOT_A_RUN or not await replays.exists(thread_id, run_id):
        raise run_not_found()
    if not await runs.cancel(thread_id, run_id):
        raise Problem(409, "the run has already ended")
    return Response(status_code=202)


@router.get(
    "/{run_id}",
    summary="Read a run's record: what the agent saw and said",
    responses=json_answer(examples.RUN_RECORD, 404),
)
async def get_run_record(
    thread_id: ThreadId,
    run_id: RunId,
    caller: CallerDep,
    pool: PoolDep,
    locks: LocksDep,
) -> RunRecord:
    """Return what the run's model was given and what it answered."""
    await check_thread_access(pool, thread_id, caller, must_exist=True)
    if run_id == NOT_A_RUN:
        raise run_not_found()
    record = await read_run_record(pool, locks, thread_id, run_id, caller.tenant_id)
    if record is None:
        raise run_not_found()
    return record.body


@router.post(
    "/{run_id}/feedback",
    summary="Rate a run",
    **no_content("Recorded (replacing the run's earlier feedback).", 404),
)
async def post_feedback(
    thread_id: ThreadId,
    run_id: RunId,
    body: Annotated[FeedbackRequest, Body(openapi_examples=examples.FEEDBACK_REQUEST)],
    caller: CallerDep,
    pool: PoolDep,
) -> Response:
    """Record (or replace) the user's rating of one run."""
    await check_thread_access(pool, thread_id, caller, must_exist=True)
    if run_id == NOT_A_RUN or not await save_feedback(pool, thread_id, run_id, caller, body.score, body.comment):
        raise run_not_found()
    return Response(status_code=204)
