"""The model sees a bounded recent list; the record keeps every message and every checkpoint."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from chatbot.agent.state import RECENT_MESSAGES
from tests.fixtures.app import running_app, services_of
from tests.fixtures.tokens import auth


async def test_long_threads_keep_the_whole_record_and_bound_what_runs_load(isolated_database_url: str) -> None:
    turns = RECENT_MESSAGES // 2 + 15
    async with running_app(isolated_database_url) as client:
        for turn in range(1, turns + 1):
            response = await client.post(
                "/v1/threads/replay/runs",
                headers=auth(),
                json={"message": {"content": f"question {turn} about car body cover"}},
            )
            assert response.status_code == 200
        pages: list[dict[str, Any]] = []
        before: str | None = None
        while True:
            params = {"limit": 100} | ({"before": before} if before else {})
            page = (await client.get("/v1/threads/replay/messages", params=params, headers=auth())).json()
            pages = page["messages"] + pages
            if not page["has_more"]:
                break
            before = page["next_before"]
        assert len(pages) == 2 * turns  # nothing persisted was trimmed
        assert [m["content"] for m in pages[::2]] == [f"question {t} about car body cover" for t in range(1, turns + 1)]

        graph = services_of(client).graph
        config: RunnableConfig = {"configurable": {"thread_id": "replay"}}
        recent = (await graph.aget_state(config)).values["messages"]
        ids = [m["id"] for m in pages]
        assert [m.id for m in recent] == ids[-RECENT_MESSAGES:]  # runs load a bounded list
        checkpoints = 0
        async for snapshot in graph.aget_state_history(config):
            window = [m.id for m in snapshot.values.get("messages", [])]
            # Every past checkpoint replays: its recent list is a contiguous run of the record.
            start = ids.index(window[0])
            assert window == ids[start : start + len(window)]
            checkpoints += 1
        assert checkpoints == 2 * turns  # two checkpoint writes per run
