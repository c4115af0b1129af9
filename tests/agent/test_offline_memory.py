"""An offline turn reads a "remember …" once: the answer and the memory writer share one extraction."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.caller import CallerContext
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.pii import PiiCategory
from chatbot.memory.writer import offline_extractor
from chatbot.responses import QuotedChunk

CHUNK = QuotedChunk(chunk_id="kb-1", version=1, title="Car body", text="Car body cover pays for damage.")


async def _one_chunk(_: CallerContext, __: str) -> list[QuotedChunk]:
    return [CHUNK]


async def _turn(text: str, *, locale: str = "en-US") -> tuple[dict[str, Any], list[MemoryJob]]:
    jobs: list[MemoryJob] = []
    deps = AgentDeps(memory_sink=jobs.append, retriever=_one_chunk)
    graph = build_graph(deps).compile(checkpointer=InMemorySaver())
    context = Context(
        tenant_id=TenantId("acme"), user_id=UserId("u1"), locale=locale, run_id=RunId("r1"), thread_id=ThreadId("t1")
    )
    state = await graph.ainvoke(
        {"messages": [HumanMessage(text, id="q1")], "turn": [HumanMessage(text, id="q1")]},
        {"configurable": {"thread_id": "t1"}},
        context=context,
    )
    return state, jobs


async def test_a_remember_request_is_noted_and_the_writer_stores_what_the_answer_saw() -> None:
    state, jobs = await _turn("Please remember that I live in Shiraz")
    assert state["outcome"]["status"] == "answered"
    assert state["messages"][-1].content == "Noted: I'll remember that."
    (job,) = jobs
    assert job.offline_candidates is not None
    assert [f.text for f in job.offline_candidates.facts] == ["I live in Shiraz"]
    # The writer takes the graph's result as it is: the same facts, not a second reading.
    assert await offline_extractor(job) is job.offline_candidates


async def test_personal_data_in_a_remember_request_gets_the_privacy_answer_and_nothing_to_store() -> None:
    state, jobs = await _turn("remember that my card number is 6037 9975 9999 0008")
    assert "we don't keep national IDs, card or account details" in state["messages"][-1].content
    (job,) = jobs
    assert job.offline_candidates is not None
    assert job.offline_candidates.facts == []
    assert job.offline_candidates.rejected == [PiiCategory.CARD_NUMBER]


@pytest.mark.parametrize("text", ["what does car body insurance cover?", "بیمه بدنه چه چیزهایی را پوشش می‌دهد؟"])
async def test_an_answered_question_hands_over_its_profile_cues_and_no_fact(text: str) -> None:
    state, jobs = await _turn(text, locale="fa-IR")
    assert state["outcome"]["citations"] == ["kb-1"]
    (job,) = jobs
    assert job.offline_candidates is not None
    assert job.offline_candidates.facts == []
    assert job.offline_candidates.profile_updates["products"] == ["car_body"]
