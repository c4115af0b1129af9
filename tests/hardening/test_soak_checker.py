"""The soak's checker finds what it must: lost, duplicated, altered and reordered messages."""

from __future__ import annotations

from datetime import UTC, datetime

from chatbot.responses import TranscriptMessage
from tests.soak.ledger import ThreadLedger, check_transcript

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def user(run: str, content: str, message_id: str | None = None) -> TranscriptMessage:
    """Return a user message of `run`."""
    return TranscriptMessage(id=message_id or f"u-{run}", role="user", content=content, created_at=NOW, run_id=run)


def answer(run: str, content: str, message_id: str | None = None) -> TranscriptMessage:
    """Return the assistant message of `run`."""
    return TranscriptMessage(id=message_id or f"a-{run}", role="assistant", content=content, created_at=NOW, run_id=run)


def two_runs() -> ThreadLedger:
    """Return a ledger of two acknowledged and answered runs."""
    ledger = ThreadLedger("t1", "acme/u1")
    ledger.ack("r1", "first")
    ledger.answer("r1", "answer one")
    ledger.ack("r2", "second")
    ledger.answer("r2", "answer two")
    return ledger


def test_a_faithful_transcript_passes() -> None:
    transcript = [user("r1", "first"), answer("r1", "answer one"), user("r2", "second"), answer("r2", "answer two")]
    verdict = check_transcript(two_runs(), transcript)
    assert verdict.problems == []
    assert (verdict.user_checked, verdict.answers_checked) == (2, 2)


def test_a_lost_user_message_or_answer_is_found() -> None:
    verdict = check_transcript(two_runs(), [user("r1", "first"), answer("r1", "answer one"), user("r2", "second")])
    assert len(verdict.lost) == 1 and "answer of run r2" in verdict.lost[0]
    no_question = [user("r1", "first"), answer("r1", "answer one"), answer("r2", "answer two")]
    verdict = check_transcript(two_runs(), no_question)
    assert any("user message of run r2 is missing" in p for p in verdict.lost)


def test_a_duplicated_message_is_found() -> None:
    ledger = two_runs()
    twice = [user("r1", "first"), answer("r1", "answer one"), user("r2", "second"), answer("r2", "answer two")]
    assert check_transcript(ledger, [*twice, twice[2]]).duplicated  # the same id again
    copied = [*twice, user("r2", "second", message_id="u-r2-copy")]
    assert check_transcript(ledger, copied).duplicated  # a second user message of one run
    unsent = [*twice, user("r3", "second")]
    assert check_transcript(ledger, unsent).duplicated  # a message of a run nobody was told of
    answered_twice = [*twice, answer("r2", "answer two", message_id="a-r2-again")]
    assert check_transcript(ledger, answered_twice).duplicated


def test_altered_or_reordered_messages_are_found() -> None:
    altered = [user("r1", "first"), answer("r1", "answer 1"), user("r2", "second"), answer("r2", "answer two")]
    assert check_transcript(two_runs(), altered).other
    reordered = [user("r2", "second"), answer("r2", "answer two"), user("r1", "first"), answer("r1", "answer one")]
    assert check_transcript(two_runs(), reordered).other
    answer_first = [answer("r1", "answer one"), user("r1", "first"), user("r2", "second"), answer("r2", "answer two")]
    assert check_transcript(two_runs(), answer_first).other
    interleaved = [user("r1", "first"), user("r2", "second"), answer("r1", "answer one"), answer("r2", "answer two")]
    assert any("interleaved" in p for p in check_transcript(two_runs(), interleaved).other)


def test_a_send_without_an_answer_may_land_once() -> None:
    ledger = ThreadLedger("t1", "acme/u1")
    ledger.maybe["again"] += 1
    ledger.ack("r2", "again")  # sent again after the drop, and acknowledged
    neither = [user("r2", "again")]
    assert check_transcript(ledger, neither).problems == []
    both = [user("r1", "again"), answer("r1", "x"), user("r2", "again")]
    verdict = check_transcript(ledger, both)
    assert verdict.problems == [] and verdict.maybes_landed == 1
    thrice = [*both, user("r3", "again")]
    assert check_transcript(ledger, thrice).duplicated
