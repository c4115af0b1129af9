"""The rolling summary on a long thread, through the runs endpoint."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from tests.fixtures.app import parse_sse, running_app
from tests.fixtures.tokens import auth

TOPICS = ["car body", "third-party", "travel", "home", "life", "supplementary health"]


async def test_a_60_turn_thread_is_summarised_into_the_window_and_the_handoff(isolated_database_url: str) -> None:
    windows: list[Sequence[BaseMessage]] = []
    async with running_app(
        isolated_database_url,
        context_tokens=900,
        summary_after_turns=20,
        agent_overrides={"window_observer": windows.append, "context_tokens": 900},
    ) as client:
        headers = auth(locale="en-US")
        for turn in range(1, 61):
            topic = TOPICS[turn % len(TOPICS)]
            body = {
                "message": {"content": f"Question number {turn}: how long is the waiting period for {topic} cover?"}
            }
            response = await client.post("/v1/threads/long/runs", json=body, headers=headers)
            assert response.status_code == 200
        state = (await client.app.state.graph.aget_state({"configurable": {"thread_id": "long"}})).values  # type: ignore[attr-defined]
        summary = state["summary"]
        assert summary and state["summarized_through"]
        assert "Question number" in summary
        system = str(windows[-1][0].content)
        assert summary in system  # the summary is in the model input
        window_text = "\n".join(str(m.content) for m in windows[-1])
        assert "Question number 1:" not in window_text.replace(summary, "")  # early turns only via the summary
        escalation = await client.post(
            "/v1/threads/long/runs", headers=headers, json={"message": {"content": "I want to talk to a human"}}
        )
        end = parse_sse(escalation.text)[-1][1]
        assert end["status"] == "escalate"
        after = (await client.app.state.graph.aget_state({"configurable": {"thread_id": "long"}})).values  # type: ignore[attr-defined]
        assert end["handoff_context"]["conversation_summary"] == after["summary"]
        # Nothing persisted was trimmed: the transcript still holds every turn.
        page = (await client.get("/v1/threads/long/messages", params={"limit": 100}, headers=headers)).json()
        assert len(page["messages"]) == 100 and page["has_more"]
