"""`ChatbotClient` against a real replica: every endpoint, typed results, error mapping, retry rules."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from chatbot.client import (
    NO_RETRIES,
    ChatbotClient,
    ChatbotError,
    ConflictError,
    RateLimitedError,
    Retries,
)
from chatbot.responses import TranscriptMessage
from tests.fixtures.app import Replica, start_replica
from tests.fixtures.client import EN_QUESTION, Recorder, RecordingTransport
from tests.fixtures.postgres import TEST_SECRET
from tests.fixtures.tokens import make_token
from tests.fixtures.wait import wait_until_sync


def client_for(replica: Replica, user: str = "u1", **kwargs: Any) -> ChatbotClient:
    """Return a client that mints its own tokens, like a backend holding the shared secret."""
    return ChatbotClient(replica.base_url, secret=TEST_SECRET, tenant_id="acme", user_id=user, locale="en-US", **kwargs)


@pytest.fixture
def client(kb_replica: Replica) -> Iterator[ChatbotClient]:
    with client_for(kb_replica) as c:
        yield c


def test_run_returns_the_typed_end_and_the_transcript_has_it(client: ChatbotClient) -> None:
    end = client.run("c-run", EN_QUESTION)
    assert end.status == "answered" and end.thread_id == "c-run"
    assert end.citations and end.citations[0].startswith("en/travel.md#")
    assert end.handoff_context is None and end.message.content
    page = client.messages("c-run")
    assert [m.role for m in page.messages] == ["user", "assistant"]
    assert page.messages[0].content == EN_QUESTION
    assert page.messages[1].id == end.message.id and page.messages[1].citations == end.citations
    assert {m.run_id for m in page.messages} == {end.run_id}
    assert page.has_more is False and page.next_before is None


def test_stream_yields_metadata_progress_tokens_and_end(client: ChatbotClient) -> None:
    events = list(client.stream("c-stream", "How do I file a car body claim and which documents do I need?"))
    names = [e.event for e in events]
    assert names[0] == "metadata" and names[-1] == "end" and "progress" in names and "token" in names
    end = events[-1].end()
    assert events[0].data == {"run_id": end.run_id, "thread_id": "c-stream"}
    assert "".join(e.data["content"] for e in events if e.event == "token") == end.message.content


def test_a_token_callable_is_asked_for_each_request(kb_replica: Replica) -> None:
    minted: list[str] = []

    def token() -> str:
        minted.append(make_token(user="u-callable", locale="en-US"))
        return minted[-1]

    with ChatbotClient(kb_replica.base_url, token=token) as client:
        client.run("c-callable", EN_QUESTION)
        assert len(client.messages("c-callable").messages) == 2
        assert client.memory().user_id == "u-callable"  # the user is read from the token
    assert len(minted) >= 3


def test_escalation_carries_a_typed_handoff_context(client: ChatbotClient) -> None:
    client.run("c-escalate", EN_QUESTION)
    end = client.run("c-escalate", "I want to talk to a human")
    assert end.status == "escalate" and end.handoff_context is not None
    assert end.handoff_context.reason == "user_requested_human"
    assert end.handoff_context.recent_messages[-1].content == "I want to talk to a human"
    assert end.handoff_context.conversation_summary


def test_messages_page_backwards_with_next_before(client: ChatbotClient) -> None:
    for question in (EN_QUESTION, "How do I cancel my car body policy?"):
        client.run("c-pages", question)
    seen: list[TranscriptMessage] = []
    before: str | None = None
    while True:
        page = client.messages("c-pages", limit=1, before=before)
        seen[:0] = page.messages
        if not page.has_more:
            break
        before = page.next_before
    assert [m.role for m in seen] == ["user", "assistant", "user", "assistant"]
    assert len({m.id for m in seen}) == 4 and seen == client.messages("c-pages", limit=100).messages


def test_feedback_is_accepted_and_an_unknown_run_is_a_404(client: ChatbotClient) -> None:
    end = client.run("c-feedback", EN_QUESTION)
    client.feedback("c-feedback", end.run_id, "up")
    client.feedback("c-feedback", end.run_id, "down", comment="too long")
    with pytest.raises(ChatbotError) as caught:
        client.feedback("c-feedback", "00000000-0000-0000-0000-000000000000", "up")
    assert caught.value.status == 404 and caught.value.problem.status == 404
    assert type(caught.value) is ChatbotError


def test_delete_thread_removes_it(client: ChatbotClient) -> None:
    client.run("c-delete", EN_QUESTION)
    client.delete_thread("c-delete")
    client.delete_thread("c-delete")  # absent: still fine
    with pytest.raises(ChatbotError) as caught:
        client.messages("c-delete")
    assert caught.value.status == 404


def test_memory_is_read_and_reset(kb_replica: Replica) -> None:
    with client_for(kb_replica, user="u-memory") as client:
        assert client.run("c-memory", "remember that my car is a Peugeot 206").status == "answered"
        wait_until_sync(
            lambda: any("Peugeot 206" in f.text for f in client.memory().facts), what="the fact remembered", timeout=10
        )
        memory = client.memory()
        assert memory.user_id == "u-memory" and memory.facts[0].category
        fact = memory.facts[0]
        assert fact.source is not None and fact.source.thread_id == "c-memory"
        client.forget_fact(fact.id)
        assert client.memory().facts == []
        with pytest.raises(ChatbotError) as caught:
            client.forget_fact(fact.id)
        assert caught.value.status == 404
        client.reset_memory()
        assert client.memory().facts == []


def test_erase_user_reports_what_it_removed(kb_replica: Replica) -> None:
    with client_for(kb_replica, user="u-erase") as client:
        end = client.run("c-erase", EN_QUESTION)
        client.feedback("c-erase", end.run_id, "up")
        report = client.erase_user()
        assert report.threads_deleted == 1 and report.feedback_deleted == 1
        with pytest.raises(ChatbotError) as caught:
            client.messages("c-erase")
        assert caught.value.status == 404


@pytest.mark.parametrize(
    ("call", "status"),
    [
        (lambda c: c.run("c-bad", "   "), 422),
        (lambda c: c.run("-not-a-thread", "hello"), 422),
        (lambda c: c.messages("c-never-ran"), 404),
    ],
    ids=["empty-message", "bad-thread-id", "unknown-thread"],
)
def test_problem_answers_raise_chatbot_error_with_the_problem(client: ChatbotClient, call: Any, status: int) -> None:
    with pytest.raises(ChatbotError) as caught:
        call(client)
    assert caught.value.status == status
    assert caught.value.problem.status == status and caught.value.problem.title and caught.value.problem.detail


def test_a_bad_token_is_a_401(kb_replica: Replica) -> None:
    with ChatbotClient(kb_replica.base_url, token=make_token(secret="another-secret-" + "x" * 30)) as client:
        with pytest.raises(ChatbotError) as caught:
            client.messages("c-anything")
    assert caught.value.status == 401 and caught.value.problem.detail == "invalid token"


def test_another_users_memory_is_a_403(kb_replica: Replica) -> None:
    with ChatbotClient(kb_replica.base_url, token=make_token(user="u1"), user_id="someone-else") as client:
        with pytest.raises(ChatbotError) as caught:
            client.memory()
    assert caught.value.status == 403


def test_a_busy_thread_raises_conflict_at_once_without_retrying(migrated_database_url: str) -> None:
    slow = start_replica(migrated_database_url, CHATBOT_OFFLINE_TOKEN_DELAY_MS="100")
    recorder = Recorder()
    try:
        with client_for(slow) as first, client_for(slow, transport=RecordingTransport(recorder)) as second:
            started = threading.Event()

            def long_run() -> None:
                for event in first.stream("c-busy", EN_QUESTION):
                    if event.event == "token":
                        started.set()

            runner = threading.Thread(target=long_run)
            runner.start()
            assert started.wait(20)
            with pytest.raises(ConflictError) as caught:
                second.run("c-busy", EN_QUESTION)
            runner.join(30)
        assert caught.value.status == 409
        assert recorder.paths == ["/v1/threads/c-busy/runs"]  # asked once, never again
    finally:
        slow.kill()


def _clear_rate_windows(database_url: str, user: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("delete from run_rate_windows where user_id = %s", (user,))


def test_rate_limits_are_retried_after_the_wait_the_service_asks_for(migrated_database_url: str) -> None:
    limited = start_replica(migrated_database_url, CHATBOT_RATE_LIMIT_PER_MINUTE="1")
    waits: list[float] = []

    def wait_out_the_window(seconds: float) -> None:
        # Instead of sleeping up to a minute, end the user's window as the clock would.
        waits.append(seconds)
        _clear_rate_windows(migrated_database_url, "u-limited")

    try:
        with client_for(limited, user="u-limited", sleep=wait_out_the_window) as client:
            client.run("c-limit-1", EN_QUESTION)
            assert client.run("c-limit-2", EN_QUESTION).status == "answered"
        assert len(waits) == 1 and waits[0] == int(waits[0]) and 1 <= waits[0] <= 60

        never_called: list[float] = []
        with client_for(limited, user="u-limited", retries=NO_RETRIES, sleep=never_called.append) as client:
            with pytest.raises(RateLimitedError) as caught:
                client.run("c-limit-3", EN_QUESTION)
        assert caught.value.status == 429 and caught.value.retry_after is not None
        assert 1 <= caught.value.retry_after <= 60 and never_called == []

        # A wait longer than the client will sit through is not waited for.
        with client_for(limited, user="u-limited", retries=Retries(max_wait=0.5), sleep=never_called.append) as c:
            with pytest.raises(RateLimitedError):
                c.run("c-limit-4", EN_QUESTION)
        assert never_called == []
    finally:
        limited.kill()


def test_unavailable_database_is_retried_then_raised(unreachable_replica: Replica) -> None:
    recorder, waits = Recorder(), list[float]()
    with ChatbotClient(
        unreachable_replica.base_url,
        token=make_token(),
        retries=Retries(attempts=1, backoff=0.01),
        transport=RecordingTransport(recorder),
        sleep=waits.append,
    ) as client:
        with pytest.raises(ChatbotError) as caught:
            client.run("c-down", EN_QUESTION)
    assert caught.value.status == 503 and caught.value.problem.status == 503
    assert len(recorder.requests) == 2 and len(waits) == 1  # the first try and one retry


def test_a_503_that_clears_is_retried_until_it_succeeds(client: ChatbotClient, kb_replica: Replica) -> None:
    recorder, waits = Recorder(refuse_first=2), list[float]()
    with client_for(kb_replica, transport=RecordingTransport(recorder), sleep=waits.append) as flaky:
        end = flaky.run("c-flaky", EN_QUESTION)
    assert end.status == "answered" and waits == [1.0, 1.0]  # Retry-After: 1, honoured each time
    assert recorder.paths == ["/v1/threads/c-flaky/runs"] * 3
    assert [m.role for m in client.messages("c-flaky").messages] == ["user", "assistant"]  # one run, not three


def test_forget_fact_with_a_dot_segment_or_a_reserved_character_never_reaches_another_resource(
    kb_replica: Replica,
) -> None:
    from chatbot.client import InvalidId

    with client_for(kb_replica, user="u-dots") as client:
        assert client.run("c-dots", "remember that my car is a Peugeot 206").status == "answered"
        wait_until_sync(lambda: bool(client.memory().facts), what="the fact remembered", timeout=10)
        kept = client.memory().facts
        for refused in ("..", ".", ""):
            with pytest.raises(InvalidId):
                client.forget_fact(refused)
        for odd in ("../..", "a/..", "?", "#", "%2e%2e", "..;", "a b", "x/../../..", "%00"):
            with pytest.raises(ChatbotError) as caught:
                client.forget_fact(odd)
            assert caught.value.status == 404, odd
        # Nothing of the user's memory went: `..` once resolved to `DELETE …/memory`.
        assert client.memory().facts == kept
