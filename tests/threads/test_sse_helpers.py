"""The stream's pure helpers, without a database: `Accept` negotiation, coalescing, and a listener's offsets.

The API tests send `Accept: application/json` or nothing; these hold the rest of the
negotiation (q-values, wildcards, malformed parameters), which a substring test for
"application/json" would get wrong, and the offset arithmetic a rejoin depends on.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from chatbot.agent.outcome import GraphOutcome, StageProgress, Token
from chatbot.failures import Failure
from chatbot.ids import RunId, ThreadId
from chatbot.responses import HandoffContext
from chatbot.threads._sse import SSE_MEDIA_TYPE, _quality, coalesce, encode_events, wants_json
from chatbot.threads._stream import Listener, RunStream, StreamEvent


@pytest.mark.parametrize(
    ("accept", "json_mode"),
    [
        (None, False),
        ("", False),
        ("   ", False),
        ("application/json", True),
        ("Application/JSON", True),
        ("text/event-stream", False),
        # Both equally wanted: the stream, the default.
        ("application/json, text/event-stream", False),
        ("*/*", False),
        # q-values decide, whatever the order.
        ("text/event-stream;q=0.5, application/json", True),
        ("application/json;q=0.5, text/event-stream", False),
        ("application/json; q = 0.7", True),
        # q=0 means "not acceptable": a substring test would answer JSON here.
        ("application/json;q=0", False),
        ("application/json;q=0, */*", False),
        # Wildcards: the most specific range names a type's quality.
        ("application/*", True),
        ("text/*", False),
        ("application/*;q=0.2, text/*;q=0.1", True),
        ("application/json;q=0.9, */*", False),
        ("application/json;q=0.1, application/*", True),
        ("application/*, application/json;q=0", False),
        # A malformed q counts as 0, never as a preference.
        ("application/json;q=abc", False),
        ("application/json;q=", False),
        ("text/event-stream;q=oops, application/json;q=0.1", True),
    ],
)
def test_accept_negotiation(accept: str | None, json_mode: bool) -> None:
    assert wants_json(accept) is json_mode


def test_quality_reads_the_q_of_the_most_specific_range() -> None:
    assert _quality("text/event-stream;q=0.5, application/json", SSE_MEDIA_TYPE) == 0.5
    assert _quality("text/*;q=0.3, */*;q=0.8", SSE_MEDIA_TYPE) == 0.3
    assert _quality("*/*;q=0.8", SSE_MEDIA_TYPE) == 0.8
    assert _quality("application/json", SSE_MEDIA_TYPE) == 0.0


def _token(text: str, offset: int) -> StreamEvent:
    return StreamEvent("token", {"content": text}, offset)


def test_coalesce_merges_consecutive_tokens_and_keeps_the_last_offset() -> None:
    events = [
        StreamEvent("metadata", {"run_id": "r"}, 0),
        _token("Sal", 3),
        _token("am ", 6),
        StreamEvent("progress", {"stage": "x"}, 6),
        _token("دنیا", 10),
        _token("!", 11),
        StreamEvent("end", {"status": "answered"}, 11),
    ]
    merged = coalesce(events)
    assert [(e.event, e.offset) for e in merged] == [
        ("metadata", 0),
        ("token", 6),
        ("progress", 6),
        ("token", 11),
        ("end", 11),
    ]
    assert [e.data["content"] for e in merged if e.event == "token"] == ["Salam ", "دنیا!"]
    # The text and the final offset are what the separate events carried.
    assert "".join(e.piece for e in merged if e.event == "token") == "Salam دنیا!"
    assert events[1] == _token("Sal", 3)  # the input is not changed


def test_coalesce_leaves_lone_events_alone() -> None:
    assert coalesce([]) == []
    lone = [_token("a", 1), StreamEvent("progress", {}, 1), _token("b", 2)]
    assert coalesce(lone) == lone


def test_encoded_events_are_one_line_each_and_carry_the_offset_id() -> None:
    body = encode_events(
        RunId("run-1"), [_token("a\u2028b", 3), _token("\x85c", 5), StreamEvent("end", {}, 5)]
    ).decode()
    blocks = body.split("\n\n")
    assert blocks[0].splitlines()[:2] == ["id: run-1:5", "event: token"]
    data = blocks[0].splitlines()[2]
    assert "\u2028" not in data and "\x85" not in data and len(data.splitlines()) == 1
    assert json.loads(data.removeprefix("data: ")) == {"content": "a\u2028b\x85c"}
    assert blocks[1] == "id: run-1:5\nevent: end\ndata: {}"


def _queued(listener: Listener) -> list[StreamEvent]:
    found = []
    while not listener.queue.empty():
        found.append(listener.queue.get_nowait())
    return found


def test_a_listener_gets_only_the_answer_past_what_it_has() -> None:
    listener = Listener(RunId("r"), ThreadId("t"), delivered=3, progress=False)
    listener.offer(_token("abc", 3))  # all of it already delivered
    listener.offer(_token("defg", 7))  # wholly new
    listener.offer(_token("ghij", 10))  # "g" already delivered: only "hij"
    assert _queued(listener) == [_token("defg", 7), _token("hij", 10)]
    assert listener.delivered == 10


def test_a_rejoining_listener_starts_mid_token() -> None:
    # Offsets count code points: two of the four Persian letters were delivered.
    listener = Listener(RunId("r"), ThreadId("t"), delivered=2, progress=False)
    listener.offer(_token("سلام", 4))
    assert _queued(listener) == [_token("ام", 4)]


def test_progress_reaches_only_the_listener_that_asked_and_other_events_always_do() -> None:
    quiet = Listener(RunId("r"), ThreadId("t"), delivered=0, progress=False)
    starter = Listener(RunId("r"), ThreadId("t"), delivered=0, progress=True)
    events = [StreamEvent("metadata", {}, 0), StreamEvent("progress", {}, 0), StreamEvent("end", {}, 0)]
    for event in events:
        quiet.offer(event)
        starter.offer(event)
    assert [e.event for e in _queued(quiet)] == ["metadata", "end"]
    assert [e.event for e in _queued(starter)] == ["metadata", "progress", "end"]
    assert quiet.delivered == starter.delivered == 0


def test_every_event_is_built_in_the_wire_format_of_the_contract() -> None:
    handoff = HandoffContext(reason="x", conversation_summary="s")
    outcome = GraphOutcome("escalate", answer="hi", message_id="m1", citations=["c1"], handoff_context=handoff)
    run = RunStream(RunId("r"), ThreadId("t"))
    starter = run.listen(from_start=True)
    run.publish(StageProgress("retrieval", status="started"))
    run.publish(StageProgress("retrieval", chunks=2))
    run.publish(Token("سل"))
    run.publish(Token("ام"))
    run.end(outcome)
    assert [(e.event, e.data, e.offset) for e in _queued(starter)] == [
        ("metadata", {"run_id": "r", "thread_id": "t"}, 0),
        ("progress", {"stage": "retrieval", "status": "started"}, 0),
        ("progress", {"stage": "retrieval", "chunks": 2}, 0),
        ("token", {"content": "سل"}, 2),
        ("token", {"content": "ام"}, 4),
        (
            "end",
            {
                "run_id": "r",
                "thread_id": "t",
                "status": "escalate",
                "message": {"id": "m1", "content": "hi"},
                "citations": ["c1"],
                "handoff_context": {
                    "reason": "x",
                    "conversation_summary": "s",
                    "user_profile": {},
                    "recent_messages": [],
                },
            },
            4,
        ),
    ]
    failed = RunStream(RunId("r2"), ThreadId("t"))
    listener = failed.listen()
    failed.fail(Failure("model_timeout"))
    assert _queued(listener)[-1] == StreamEvent("error", Failure("model_timeout").problem(), 0)
    # A replayed run's end (threads/rejoin.py) is the same event, read from the stored outcome.
    replayed = GraphOutcome.from_stored(outcome.stored(), "hi")
    assert StreamEvent.end(RunId("r"), ThreadId("t"), replayed, 2).data == _queued(run.listen())[-1].data


async def test_held_tokens_wait_for_the_flush_and_a_terminal_event_ends_the_hold_at_once() -> None:
    listener = Listener(RunId("r"), ThreadId("t"), delivered=0, progress=False)
    listener.offer(_token("a", 1))
    batch = await listener.next_batch()

    async def later() -> None:
        await asyncio.sleep(0)  # not polling: a yield, so the hold below has begun when these arrive
        listener.offer(_token("b", 2))
        listener.offer(_token("c", 3))

    feeder = asyncio.create_task(later())
    # Only tokens arrive: the hold lasts its whole time and takes them all.
    held = await listener.hold(batch, 0.05)
    await feeder
    assert [e.data["content"] for e in held] == ["a", "b", "c"]

    listener.offer(_token("d", 4))
    batch = await listener.next_batch()
    asyncio.get_running_loop().call_soon(listener.offer, StreamEvent("end", {}, 4))
    # The end is never held: it ends an hour's hold (wait_for only keeps a broken hold from hanging).
    held = await asyncio.wait_for(listener.hold(batch, 3600), 10)
    assert [e.event for e in held] == ["token", "end"]
