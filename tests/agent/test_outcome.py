"""The graph's outcome and events as types: read from the graph's update, stored as before."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from chatbot.agent.outcome import GraphOutcome, StageProgress, Token, custom_stream_sink, outcome_of
from chatbot.agent.state import ConversationState, Outcome, StoredFailure
from chatbot.failures import Failure


def test_an_answered_outcome_is_read_from_the_generate_update_with_its_answer() -> None:
    stored = Outcome(status="answered", message_id="m1", citations=["c1"], handoff_context=None)
    update = {"generate": ConversationState(outcome=stored, messages=[AIMessage(content="the answer", id="m1")])}
    outcome = outcome_of(update)
    assert outcome == GraphOutcome("answered", answer="the answer", message_id="m1", citations=["c1"])
    # The channel keeps the shape every checkpoint written so far has.
    assert outcome.stored() == stored


def test_a_failed_outcome_carries_its_failure_and_stores_as_before() -> None:
    stored = Outcome(status="error", failure=StoredFailure(reason="model_rate_limited", retry_after=2.0))
    outcome = outcome_of({"generate": {"outcome": stored}})
    assert outcome == GraphOutcome("error", failure=Failure("model_rate_limited", 2.0))
    assert outcome.stored() == stored


def test_updates_of_other_nodes_and_the_empty_outcome_of_load_memory_are_no_outcome() -> None:
    assert outcome_of({"retrieve": {"retrieved": []}}) is None
    assert outcome_of({"load_memory": {"outcome": {}}}) is None
    assert outcome_of({"generate": {"outcome": {}}}) is None


def test_without_a_sink_the_events_reach_the_custom_stream_in_their_old_shape() -> None:
    written: list[object] = []
    sink = custom_stream_sink(written.append)
    sink(StageProgress("retrieval", status="started"))
    sink(StageProgress("retrieval", chunks=3))
    sink(Token("سلام"))
    assert written == [
        {"event": "progress", "data": {"stage": "retrieval", "status": "started"}},
        {"event": "progress", "data": {"stage": "retrieval", "chunks": 3}},
        {"event": "token", "data": {"content": "سلام"}},
    ]
