"""What `generate` puts in the run record about its window (agent/record.py), as stored keys."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from chatbot.agent._window import Window
from chatbot.agent.record import chunk_refs, chunk_versions, shortened_parts, window_by_ids
from chatbot.agent.system_message import SystemCuts
from chatbot.responses import QuotedChunk

HISTORY: list[BaseMessage] = [
    HumanMessage("q0", id="q-0"),
    AIMessage("a0", id="a-0"),
    HumanMessage("q1", id="q-1"),
    AIMessage("a1", id="a-1"),
]
QUESTION = HumanMessage("q2", id="q-2")


def window(
    kept: list[BaseMessage],
    first_kept: int,
    *,
    chunks: bool = False,
    question: bool = False,
    system: bool = False,
    question_chars: int | None = None,
) -> Window:
    return Window(
        messages=[SystemMessage("system"), *kept, QUESTION],
        tokens=100,
        first_kept=first_kept,
        chunks_shortened=chunks,
        question_shortened=question,
        system_shortened=system,
        question_chars=question_chars,
        cuts=SystemCuts(chunks_kept=1),
    )


def test_a_suffix_of_the_history_is_stored_as_a_span() -> None:
    ids = window_by_ids(window(HISTORY[2:], 2), HISTORY)
    assert ids.dump() == {
        "window_span": ["q-1", 3],
        "question_chars": None,
        "system_cuts": {
            "chunks_kept": 1,
            "chunk_permille": 1000,
            "chunks_omitted": False,
            "system_chars": None,
            "memory_format": 2,
        },
    }


def test_a_window_that_skipped_messages_lists_every_id() -> None:
    ids = window_by_ids(window([HISTORY[0], HISTORY[3]], 0, question=True, question_chars=40), HISTORY)
    assert ids.span is None and ids.ids == ("q-0", "a-1", "q-2")
    assert ids.dump()["window"] == ["q-0", "a-1", "q-2"] and ids.question_chars == 40


def test_what_was_cut_is_named_in_order() -> None:
    assert shortened_parts(window([], 4)) == ()
    assert shortened_parts(window([], 4, system=True, chunks=True)) == ("chunks", "system")


def test_chunk_versions_default_to_one_and_keep_rank_order() -> None:
    chunks = [QuotedChunk(chunk_id="b#2", version=3, text=""), QuotedChunk(chunk_id="a#1", text="")]
    assert chunk_versions(chunks) == (("b#2", 3), ("a#1", 1))
    assert chunk_refs(chunks) == [["b#2", 3], ["a#1", 1]]  # the `retrieved` channel's form
