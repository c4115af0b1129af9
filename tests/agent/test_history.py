"""The transcript channel stores deltas, yet every past checkpoint can still be read back."""

from __future__ import annotations

from tests.fixtures.app import running_app
from tests.fixtures.tokens import auth


async def test_past_checkpoints_replay_the_transcript_as_it_was(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        for turn in range(1, 61):  # past the channel's snapshot interval
            response = await client.post(
                "/v1/threads/replay/runs",
                headers=auth(),
                json={"message": {"content": f"question {turn} about car body cover"}},
            )
            assert response.status_code == 200
        graph = client.app.state.graph  # type: ignore[attr-defined]
        config = {"configurable": {"thread_id": "replay"}}
        current = (await graph.aget_state(config)).values["messages"]
        assert len(current) == 120
        seen = 0
        async for snapshot in graph.aget_state_history(config):
            messages = snapshot.values.get("messages", [])
            # Each past checkpoint holds exactly the prefix of the transcript it had then.
            assert [m.id for m in messages] == [m.id for m in current[: len(messages)]]
            seen += 1
        assert seen == 120  # two checkpoints per run
