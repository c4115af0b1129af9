"""Recall's index write waits for the answer when the search did not need it, and still passes the run's fence.

A run indexes what its thread said since the last indexed turn: usually the previous run's
question and answer, which its window holds anyway. The model is called before that write
(agent/_index_later.py): the window is handed over with the index as it was, and the turns
are in it once the run has ended. A write after the run's lease is lost raises `LeaseLost`
and writes nothing, as the index writes before the answer do.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from chatbot.agent._recall import question_terms
from chatbot.db.locks import Fence, LeaseLost
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.recall.service import IndexWriter, PendingIndexWrite, RecallQuery, ThreadRecall, is_conversation_message
from tests.fixtures.app import running_app, services_of
from tests.recall.conversation import ask, long_thread
from tests.recall.test_recall_scope import thread_turn_rows

PLATE = "The other driver's plate was 52K913."
QUESTION = "What was the other driver's plate?"
# Small enough that 20 turns no longer fit the window, large enough that it keeps the previous question
# and answer (600 keeps no earlier turn: then the search needs them, and indexes them first).
WINDOW = 800


async def test_the_index_is_written_after_the_answer_with_the_previous_turns_only(isolated_database_url: str) -> None:
    url = isolated_database_url
    thread = f"after-{uuid.uuid4().hex[:6]}"
    indexed_at_window: list[int] = []
    watching = False

    def note_index(_: Sequence[BaseMessage]) -> None:
        if watching:
            indexed_at_window.append(len(thread_turn_rows(url, thread)))

    async with running_app(url, context_tokens=WINDOW, agent_overrides={"window_observer": note_index}) as client:
        await long_thread(client, thread, "en", 20, {3: PLATE})
        before = thread_turn_rows(url, thread)
        state = await services_of(client).runs.graph.aget_state(_config(thread))
        said = [str(m.id) for m in state.values["messages"] if is_conversation_message(m)]
        watching = True
        record = await ask(client, thread, QUESTION, "en")
    after = thread_turn_rows(url, thread)
    assert PLATE in [r["content"] for r in record["context"]["recalled"]]  # the search found it as before
    # When the model got its window the index was as the run found it: one question and answer behind.
    assert indexed_at_window == [len(before)] and after[: len(before)] == before
    # After the run, the previous turns are in it, and nothing of the run's own turn.
    assert [i for i, _ in after] == said and len(after) == len(before) + 2
    assert QUESTION not in [c for _, c in after]


@pytest.mark.parametrize("oldest_kept", ["indexed", "the first not indexed"])
async def test_an_index_write_handed_over_past_a_lost_lease_raises_and_writes_nothing(
    isolated_database_url: str, oldest_kept: str
) -> None:
    url = isolated_database_url
    thread = f"after-fenced-{uuid.uuid4().hex[:6]}"
    async with running_app(url, context_tokens=WINDOW) as client:
        await long_thread(client, thread, "en", 20, {3: PLATE})
        indexed = thread_turn_rows(url, thread)
        recent = (await services_of(client).runs.graph.aget_state(_config(thread))).values["messages"]
        said = [str(m.id) for m in recent if is_conversation_message(m)]
        assert said[: len(indexed)] == [i for i, _ in indexed] and len(said) == len(indexed) + 2
        handed: list[PendingIndexWrite] = []
        stale = IndexWriter(
            TenantId("acme"), UserId("u1"), Fence(ThreadId(thread), str(uuid.uuid4())), defer=handed.append
        )  # not its token
        # The window keeps an indexed turn, or the previous question (the index is one question
        # and answer behind): either way the search covers every turn before it without the write.
        query = RecallQuery(
            ThreadId(thread),
            stale,
            recent,
            whole=False,
            window_first=indexed[-2][0] if oldest_kept == "indexed" else said[-2],
            terms=question_terms(QUESTION, []),
            question=QUESTION,
            hits=3,
        )
        hits = await ThreadRecall(services_of(client).pool).find(query)
        assert PLATE in [h.turn.content for h in hits]
        assert len(handed) == 1 and [str(m.id) for m in handed[0].messages] == said[-2:]
        assert thread_turn_rows(url, thread) == indexed  # handed over, not written
        with pytest.raises(LeaseLost):
            await handed[0].write()
    assert thread_turn_rows(url, thread) == indexed


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}
