"""`AsyncChatbotClient` against a real replica: the same API and rules as the sync client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from chatbot.client import AsyncChatbotClient, ChatbotError, ConflictError, Retries
from tests.fixtures.app import Replica, start_replica
from tests.fixtures.client import EN_QUESTION, AsyncRecordingTransport, Recorder
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.wait import wait_until


def client_for(replica: Replica, user: str = "u-async", **kwargs: Any) -> AsyncChatbotClient:
    """Return an asyncio client minting its own tokens."""
    return AsyncChatbotClient(
        replica.base_url, secret=TEST_SECRET, tenant_id="acme", user_id=user, locale="en-US", **kwargs
    )


@pytest.fixture
async def client(kb_replica: Replica) -> AsyncIterator[AsyncChatbotClient]:
    async with client_for(kb_replica) as c:
        yield c


async def test_stream_run_and_transcript(client: AsyncChatbotClient) -> None:
    events = [e async for e in client.stream("a-stream", EN_QUESTION)]
    end = events[-1].end()
    assert [events[0].event, events[-1].event] == ["metadata", "end"]
    assert "".join(e.data["content"] for e in events if e.event == "token") == end.message.content
    second = await client.run("a-stream", "How do I cancel my car body policy?")
    assert second.status == "answered" and second.citations
    page = await client.messages("a-stream", limit=3)
    assert [m.role for m in page.messages] == ["assistant", "user", "assistant"] and page.has_more
    older = await client.messages("a-stream", before=page.next_before)
    assert [m.content for m in older.messages] == [EN_QUESTION]


async def test_feedback_memory_delete_and_erasure(kb_replica: Replica) -> None:
    async with client_for(kb_replica, user="u-async-all") as client:
        end = await client.run("a-all", "remember that I live in Shiraz")
        await client.feedback("a-all", end.run_id, "up", comment="thanks")

        async def remembered() -> bool:
            return any("Shiraz" in f.text for f in (await client.memory()).facts)

        await wait_until(remembered, what="the fact remembered", timeout=10)
        fact = (await client.memory()).facts[0]
        assert fact.source is not None and fact.source.run_id == end.run_id
        await client.forget_fact(fact.id)
        assert (await client.memory()).facts == []
        await client.reset_memory()
        assert (await client.memory()).facts == []
        await client.run("a-other", EN_QUESTION)
        await client.delete_thread("a-other")
        with pytest.raises(ChatbotError) as caught:
            await client.messages("a-other")
        assert caught.value.status == 404
        report = await client.erase_user()
        assert report.threads_deleted == 1 and report.feedback_deleted == 1


async def test_a_busy_thread_raises_conflict_once(migrated_database_url: str) -> None:
    slow = await asyncio.to_thread(start_replica, migrated_database_url, CHATBOT_OFFLINE_TOKEN_DELAY_MS="100")
    recorder = Recorder()
    try:
        async with client_for(slow) as first, client_for(slow, transport=AsyncRecordingTransport(recorder)) as second:
            stream = first.stream("a-busy", EN_QUESTION)
            assert isinstance(stream, AsyncGenerator)  # typed an AsyncIterator; a generator, which aclose() stops
            async for event in stream:
                if event.event == "token":
                    break
            with pytest.raises(ConflictError):
                await second.run("a-busy", EN_QUESTION)
            await stream.aclose()
        assert recorder.paths == ["/v1/threads/a-busy/runs"]
    finally:
        slow.kill()


async def test_a_503_that_clears_is_retried(kb_replica: Replica) -> None:
    recorder, waits = Recorder(refuse_first=1), []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    transport = AsyncRecordingTransport(recorder)
    async with client_for(kb_replica, transport=transport, sleep=record, retries=Retries(attempts=1)) as client:
        end = await client.run("a-flaky", EN_QUESTION)
    assert end.status == "answered" and waits == [1.0] and len(recorder.requests) == 2
