"""The rolling summary on a long thread, through the runs endpoint."""

from __future__ import annotations

import re
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from tests.fixtures.app import running_app, services_of
from tests.fixtures.sse import parse_sse
from tests.fixtures.tokens import auth

TOPICS = ["car body", "third-party", "travel", "home", "life", "supplementary health"]


async def test_a_60_turn_thread_is_summarised_into_the_window_and_the_handoff(isolated_database_url: str) -> None:
    windows: list[Sequence[BaseMessage]] = []
    async with running_app(
        isolated_database_url,
        context_tokens=900,
        summary_after_turns=20,
        recall_hits=0,  # the summary alone carries the early turns here (tests/recall: recall's own)
        agent_overrides={"window_observer": windows.append, "context_tokens": 900},
    ) as client:
        headers = auth(locale="en-US")
        for turn in range(1, 61):
            topic = TOPICS[turn % len(TOPICS)]
            question = f"Question number {turn}: how long is the waiting period for {topic} cover?"
            if turn == 1:  # what the conversation opened with, which the summary must keep
                question = "Question number 1: hail damaged my car, claim CLM-7731 on my car body policy"
            body = {"message": {"content": question}}
            response = await client.post("/v1/threads/long/runs", json=body, headers=headers)
            assert response.status_code == 200
        state = (await services_of(client).graph.aget_state({"configurable": {"thread_id": "long"}})).values
        summary = state["summary"]
        assert summary and state["summarized_through"]
        assert "Question number" in summary
        folded = [int(n) for n in re.findall(r"Question number (\d+):", summary)]
        assert "CLM-7731" in summary and folded[0] == 1  # the opening stays
        assert max(folded) >= 45  # as do the latest turns folded
        system = str(windows[-1][0].content)
        assert summary in system  # the summary is in the model input
        window_text = "\n".join(str(m.content) for m in windows[-1])
        assert "Question number 1:" not in window_text.replace(summary, "")  # early turns only via the summary
        escalation = await client.post(
            "/v1/threads/long/runs", headers=headers, json={"message": {"content": "I want to talk to a human"}}
        )
        end = parse_sse(escalation.text)[-1][1]
        assert end["status"] == "escalate"
        after = (await services_of(client).graph.aget_state({"configurable": {"thread_id": "long"}})).values
        assert end["handoff_context"]["conversation_summary"] == after["summary"]
        # Nothing persisted was trimmed: the transcript still holds every turn.
        page = (await client.get("/v1/threads/long/messages", params={"limit": 100}, headers=headers)).json()
        assert len(page["messages"]) == 100 and page["has_more"]


async def test_a_raising_summariser_leaves_every_run_successful(isolated_database_url: str) -> None:
    from tests.fixtures.models import ScriptedChatModel

    model = ScriptedChatModel(mode="summary-fails", reply={"status": "answered", "answer": "Noted.", "citations": []})
    async with running_app(
        isolated_database_url,
        context_tokens=400,
        summary_after_turns=2,
        agent_overrides={"chat_model": model, "context_tokens": 400, "summary_after_turns": 2},
    ) as client:
        headers = auth(locale="en-US")
        failed_folds_before = _failed_folds(await client.get("/metrics"))
        for turn in range(1, 16):
            body = {"message": {"content": f"Turn {turn}: tell me about the waiting period of travel cover please"}}
            response = await client.post("/v1/threads/no-summary/runs", json=body, headers=headers)
            assert parse_sse(response.text)[-1][0] == "end"
            assert parse_sse(response.text)[-1][1]["status"] == "answered"
        state = (await services_of(client).graph.aget_state({"configurable": {"thread_id": "no-summary"}})).values
        assert _failed_folds(await client.get("/metrics")) > failed_folds_before  # folds were tried
    assert state.get("summary", "") == ""  # every fold failed, so the old (empty) summary stayed
    assert state["turns"] == 15


def _failed_folds(metrics: object) -> float:
    for line in metrics.text.splitlines():  # type: ignore[attr-defined]
        if line.startswith('chatbot_summary_folds_total{outcome="unchanged"}'):
            return float(line.split()[-1])
    return 0.0


async def test_each_fold_reads_only_turns_no_earlier_fold_read(isolated_database_url: str) -> None:
    from tests.fixtures.models import ScriptedChatModel

    model = ScriptedChatModel(mode="summary-records", reply={"status": "answered", "answer": "Noted.", "citations": []})
    overrides = {"chat_model": model, "context_tokens": 400, "summary_after_turns": 2}
    async with running_app(isolated_database_url, context_tokens=400, agent_overrides=overrides) as client:
        for turn in range(1, 31):
            body = {"message": {"content": f"Question-{turn:02d} about the waiting period of travel cover"}}
            response = await client.post("/v1/threads/folds/runs", json=body, headers=auth(locale="en-US"))
            assert parse_sse(response.text)[-1][1]["status"] == "answered"
    assert len(model.prompts) >= 2
    seen: set[str] = set()
    for prompt in model.prompts:
        folded = {f"Question-{t:02d}" for t in range(1, 31) if f"Question-{t:02d}" in prompt}
        assert folded and not folded & seen  # only newly dropped turns, never one folded before
        seen |= folded
    assert f"- summary {len(model.prompts) - 1}" in model.prompts[-1]  # and it extends the previous summary
