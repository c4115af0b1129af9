"""Event ids, rejoining a run and the run record, through the client.

These need the lead's run-path work (SSE `id:` lines, `GET …/runs/{run_id}/stream`) and
the run-record endpoint (`GET …/runs/{run_id}`); they fail on a branch without them.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from typing import Any

import httpx
import pytest

from chatbot.client import ChatbotClient, ChatbotError, Event
from tests.fixtures.app import Replica
from tests.fixtures.client import EN_QUESTION, Recorder, RecordingTransport
from tests.fixtures.postgres import TEST_SECRET


def client_for(replica: Replica, **kwargs: Any) -> ChatbotClient:
    """Return a client minting its own tokens."""
    return ChatbotClient(
        replica.base_url, secret=TEST_SECRET, tenant_id="acme", user_id="u-join", locale="en-US", **kwargs
    )


@pytest.fixture
def client(kb_replica: Replica) -> Iterator[ChatbotClient]:
    with client_for(kb_replica) as c:
        yield c


def answer_of(events: list[Event]) -> str:
    return "".join(e.data["content"] for e in events if e.event == "token")


def test_every_event_id_is_the_run_and_the_answer_offset(client: ChatbotClient) -> None:
    events = list(client.stream("j-ids", EN_QUESTION))
    run_id, offset = events[0].data["run_id"], 0
    for event in events:
        if event.event == "token":
            offset += len(event.data["content"])
        assert event.id == f"{run_id}:{offset}"


def test_join_replays_a_finished_run_whole_or_from_an_offset(client: ChatbotClient) -> None:
    end = client.run("j-replay", EN_QUESTION)
    whole = list(client.join("j-replay", end.run_id))
    assert whole[0].event == "metadata" and whole[-1].end() == end
    assert answer_of(whole) == end.message.content
    cut = len(end.message.content) // 2
    rest = list(client.join("j-replay", end.run_id, last_event_id=f"{end.run_id}:{cut}"))
    assert answer_of(rest) == end.message.content[cut:] and rest[-1].end() == end


def test_join_follows_a_run_in_flight_to_its_end(kb_replica: Replica) -> None:
    with client_for(kb_replica) as first, client_for(kb_replica) as second:
        stream = first.stream("j-live", EN_QUESTION)
        assert isinstance(stream, Generator)  # typed an Iterator; a generator, which close() stops
        head = [next(stream) for _ in range(4)]  # metadata, progress x2, a first token
        assert head[-1].event == "token" and head[-1].id is not None
        rest = list(second.join("j-live", head[0].data["run_id"], last_event_id=head[-1].id))
        stream.close()
    assert answer_of(head) + answer_of(rest) == rest[-1].end().message.content


def test_join_of_an_unknown_run_is_a_404(client: ChatbotClient) -> None:
    client.run("j-404", EN_QUESTION)
    with pytest.raises(ChatbotError) as caught:
        list(client.join("j-404", "00000000-0000-0000-0000-000000000000"))
    assert caught.value.status == 404


class _CutStream(httpx.SyncByteStream):
    """A response body that breaks (as a dropped connection does) after a few token events."""

    def __init__(self, inner: httpx.SyncByteStream, tokens: int) -> None:
        self.inner, self.tokens = inner, tokens

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self.inner:
            start = 0
            while (found := chunk.find(b"event: token", start)) != -1:
                seen += 1
                if seen > self.tokens:
                    # Cut just before the next token event: the answer is certainly unfinished,
                    # however the server happened to batch its events into chunks.
                    yield chunk[:found]
                    raise httpx.ReadError("connection dropped")
                start = found + 1
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _CuttingTransport(RecordingTransport):
    """Break the first run's stream mid-answer; pass everything else through."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and len(self.recorder.requests) == 1:
            assert isinstance(response.stream, httpx.SyncByteStream)
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=_CutStream(response.stream, 3),
                extensions=response.extensions,
            )
        return response


def test_a_stream_that_breaks_mid_run_is_rejoined_once_and_loses_nothing(kb_replica: Replica) -> None:
    recorder = Recorder()
    with client_for(kb_replica, transport=_CuttingTransport(recorder)) as client:
        events = list(client.stream("j-cut", EN_QUESTION))
    end = events[-1].end()
    assert [e.event for e in events].count("metadata") == 1
    assert answer_of(events) == end.message.content
    assert recorder.paths == ["/v1/threads/j-cut/runs", f"/v1/threads/j-cut/runs/{end.run_id}/stream"]
    last_id = recorder.requests[1].headers["last-event-id"]
    assert last_id.startswith(f"{end.run_id}:") and 0 < int(last_id.split(":")[-1]) < len(end.message.content)


def test_the_run_record_shows_what_the_agent_saw_and_said(client: ChatbotClient) -> None:
    end = client.run("j-record", EN_QUESTION)
    record = client.run_record("j-record", end.run_id)
    assert record.run_id == end.run_id and record.status == "answered"
    assert record.input.content == EN_QUESTION
    assert record.answer is not None and record.answer.id == end.message.id
    assert record.citations == end.citations
    assert set(end.citations) <= {chunk.chunk_id for chunk in record.context.retrieved}
    assert EN_QUESTION in [m.content for m in record.context.messages]


def test_a_join_that_outlives_its_connection_is_rejoined_too(kb_replica: Replica) -> None:
    # A join is followed across one break just as a stream is: the run started here is
    # watched through a join whose first connection is cut.
    recorder = Recorder()
    with client_for(kb_replica) as runner, client_for(kb_replica, transport=_CuttingJoin(recorder)) as watcher:
        started = threading.Event()
        run_ids: list[str] = []

        def go() -> None:
            for event in runner.stream("j-join-cut", EN_QUESTION):
                if event.event == "metadata":
                    run_ids.append(event.data["run_id"])
                    started.set()

        thread = threading.Thread(target=go)
        thread.start()
        assert started.wait(20)
        events = list(watcher.join("j-join-cut", run_ids[0]))
        thread.join(30)
    assert answer_of(events) == events[-1].end().message.content
    assert len(recorder.requests) == 2 and "last-event-id" in recorder.requests[1].headers


class _CuttingJoin(RecordingTransport):
    """Break the first rejoin's stream after a few tokens."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if len(self.recorder.requests) == 1:
            assert isinstance(response.stream, httpx.SyncByteStream)
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=_CutStream(response.stream, 2),
                extensions=response.extensions,
            )
        return response
