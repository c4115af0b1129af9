"""A run that fails after retrieval keeps only chunk ids: no checkpoint row holds chunk text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessageChunk, BaseMessage, ToolCallChunk
from langchain_core.outputs import ChatGenerationChunk

from chatbot.caller import CallerContext
from chatbot.db.pool import make_pool
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.retrieval.search import search_knowledge
from tests.fixtures.app import running_app, services_of
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.models import ScriptedChatModel, StreamingChatModel
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import auth
from tests.fixtures.wait import forever

QUESTION = "What does travel insurance cover for medical costs abroad?"
CALLER = CallerContext(TenantId("acme"), UserId("u1"), "en-US")


class StallingModel(StreamingChatModel):
    """Streams the first pieces of its answer, then never finishes."""

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        first: ToolCallChunk = {
            "name": self.tool_name,
            "args": '{"status": "answered", "answer": "Medical ',
            "id": "c1",
            "index": 0,
        }
        yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[first]))
        more: ToolCallChunk = {"name": None, "args": "costs abroad ", "id": None, "index": 0}
        yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[more]))
        await forever()


async def retrieved_texts(url: str) -> list[str]:
    """Return the text of the chunks a run retrieves for QUESTION."""
    pool = make_pool(url, settings_for(url), name="t", min_size=1, max_size=1)
    await pool.open(wait=True)
    try:
        return [c.text for c in await search_knowledge(pool, CALLER, QUESTION)]
    finally:
        await pool.close()


def needles(texts: list[str]) -> list[str]:
    """Return a distinctive single-line slice of each text (JSON escapes nothing in it)."""
    found = []
    for text in texts:
        lines = [line.strip() for line in text.splitlines() if len(line.strip()) >= 30]
        line = max(lines, key=len).replace('"', "").replace("\\", "")
        found.append(line[:60])
    return found


def rows_holding(url: str, needle: str) -> list[str]:
    """Return which checkpoint tables hold `needle` anywhere in any row."""
    encoded = needle.encode()
    holders = []
    with psycopg.connect(url) as conn:
        for table, column in (("checkpoint_blobs", "blob"), ("checkpoint_writes", "blob")):
            for (blob,) in conn.execute(f"select {column} from {table} where {column} is not null"):
                if encoded in bytes(blob):
                    holders.append(table)
        for checkpoint, metadata in conn.execute("select checkpoint::text, metadata::text from checkpoints"):
            if needle in checkpoint or needle in metadata:
                holders.append("checkpoints")
    return holders


async def fail_by_raising(url: str, thread: str) -> dict[str, Any]:
    model = ScriptedChatModel(mode="fail")
    async with running_app(url, agent_overrides={"chat_model": model}) as client:
        run = await services_of(client).runs.start(ThreadId(thread), CALLER, QUESTION)
        result = await run.terminal()
    assert result.event == "error" and result.data["status"] == 502
    return {"run_id": run.run_id}


async def fail_by_timing_out(url: str, thread: str) -> dict[str, Any]:
    overrides = {"chat_model": ScriptedChatModel(mode="hang"), "model_timeout_seconds": 0.5}
    async with running_app(url, model_timeout_seconds=0.5, agent_overrides=overrides) as client:
        run = await services_of(client).runs.start(ThreadId(thread), CALLER, QUESTION)
        result = await run.terminal()
    assert result.event == "error" and result.data["status"] == 504
    return {"run_id": run.run_id}


async def fail_by_cancelling_mid_stream(url: str, thread: str) -> dict[str, Any]:
    overrides = {"chat_model": StallingModel(mode="answer")}
    async with running_app(url, shutdown_grace_seconds=0.2, agent_overrides=overrides) as client:
        run = await services_of(client).runs.start(ThreadId(thread), CALLER, QUESTION)
        while (await asyncio.wait_for(run.queue.get(), 10)).event != "token":
            pass
        # Leaving the app shuts it down: the grace period passes and the run is cancelled.
    left = [run.queue.get_nowait() for _ in range(run.queue.qsize())]
    assert left and left[-1].event == "error"  # cut short by the shutdown, not answered
    return {"run_id": run.run_id}


@pytest.mark.parametrize("fail", [fail_by_raising, fail_by_timing_out, fail_by_cancelling_mid_stream])
async def test_a_run_failing_after_retrieval_leaves_no_chunk_text_in_any_checkpoint_row(
    isolated_database_url: str, fail: Any
) -> None:
    url = isolated_database_url
    await load_demo_kb(url)
    texts = await retrieved_texts(url)
    assert texts
    run = await fail(url, "fails")
    for needle in needles(texts):
        assert rows_holding(url, needle) == [], needle
    async with running_app(url) as client:
        record = (await client.get(f"/v1/threads/fails/runs/{run['run_id']}", headers=auth(locale="en-US"))).json()
        assert record["status"] == "error"
        # The ids it retrieved were kept, and resolve to the text as it read.
        assert [c["text"] for c in record["context"]["retrieved"]] == texts
        response = await client.post(
            "/v1/threads/fails/runs",
            json={"message": {"content": QUESTION}},
            headers={"Accept": "application/json", **auth(locale="en-US")},
        )
    assert response.status_code == 200 and response.json()["status"] == "answered"
    # The scan does find chunk text where it belongs: the offline answer quotes the best chunk.
    assert rows_holding(url, needles(texts[:1])[0])
