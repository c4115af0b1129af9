"""The run record endpoint: what the model was given, exactly, and the knowledge as it read then."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import BaseMessage, HumanMessage

from chatbot.caller import CallerContext
from chatbot.db.pool import make_pool
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.versions import prune_superseded_chunks, read_chunk_versions
from chatbot.threads.record import prompt_text, read_run_record
from tests.fixtures.app import running_app, services_of
from tests.fixtures.messages import send_for_answer
from tests.fixtures.models import ScriptedChatModel
from tests.fixtures.postgres import settings_for
from tests.fixtures.retrieval_kb import write_docs
from tests.fixtures.tokens import auth

EN = {"locale": "en-US"}
QUESTIONS = [
    "How do I file a car body claim and which documents do I need?",
    "Remember that I drive a Peugeot 206 for work",
    "How many days after expiry can I renew third-party insurance?",
    "What does travel insurance cover for medical costs abroad?",
    "How do I cancel my car body policy?",
    "Which payment methods can I use for my premium?",
    "What does home insurance cover after a fire?",
    "Is there a waiting period in supplementary health insurance?",
]


async def record_of(client: httpx.AsyncClient, thread: str, run_id: str, **token: Any) -> dict[str, Any]:
    response = await client.get(f"/v1/threads/{thread}/runs/{run_id}", headers=auth(**token))
    assert response.status_code == 200, response.text
    return dict(response.json())


def as_given(window: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """Return the model's input after the system message, as the record shows messages."""
    return [
        {"id": str(m.id), "role": "user" if isinstance(m, HumanMessage) else "assistant", "content": str(m.content)}
        for m in window[1:]
    ]


async def test_the_record_shows_the_window_the_model_was_given_before_and_after_summary_folds(
    kb_database_url: str,
) -> None:
    windows: list[Sequence[BaseMessage]] = []
    overrides = {"window_observer": windows.append, "context_tokens": 700, "summary_after_turns": 2}
    async with running_app(kb_database_url, agent_overrides=overrides) as client:
        ends = []
        for turn in range(16):
            ends.append(await send_for_answer(client, "record-folds", QUESTIONS[turn % len(QUESTIONS)], **EN))
            if turn == 1:
                await services_of(client).memory.drain(30)  # the remembered fact lands
        records = [await record_of(client, "record-folds", end["run_id"], **EN) for end in ends]
        state = services_of(client)
        prompt = await prompt_text(state.pool, records[0]["context"]["system_prompt_sha256"])
        # What the command-line replay also shows: the system message rebuilt from the record.
        rebuilt = [
            (await read_run_record(state.pool, state.locks, ThreadId("record-folds"), e["run_id"], TenantId("acme")))
            for e in ends
        ]
    assert len(windows) == len(records) == 16
    summaries = [r["context"]["summary"] for r in records]
    assert summaries[0] == "" and summaries[-1] != ""  # runs before and after a fold
    assert len(set(summaries)) >= 3  # and more than one fold
    assert prompt is not None
    for end, record, window, full in zip(ends, records, windows, rebuilt, strict=True):
        assert record["run_id"] == end["run_id"] and record["thread_id"] == "record-folds"
        assert record["status"] == end["status"] and record["model"] == "offline"
        assert record["answer"] == {**end["message"], "complete": True}
        offline_call = {"kind": "answer", "model": "offline", "input_tokens": 0, "output_tokens": 0}
        assert record["usage"] == [offline_call | {"cached_input_tokens": 0}]
        assert record["citations"] == end["citations"]
        assert record["context"]["messages"] == as_given(window)
        system = str(window[0].content)
        context = record["context"]
        assert system.startswith(prompt.strip())
        # The whole summary, or its head when the budget cut it (the record says so; the exact
        # rebuild below holds the rest).
        cut = full is not None and "system" in full.shortened
        assert (context["summary"][:200] if cut else context["summary"]) in system
        assert all(fact in system for fact in context["facts"])
        assert full is not None and full.system_message == system  # the whole input, exactly
        assert record["input"]["content"] in QUESTIONS
    assert any(full is not None and "chunks" in full.shortened for full in rebuilt)  # cut chunks rebuilt too
    assert any("Peugeot" in fact for fact in records[-1]["context"]["facts"])  # memory as loaded


async def test_the_record_keeps_the_text_as_retrieved_after_its_document_changes_and_goes(
    isolated_database_url: str, tmp_path: Path
) -> None:
    travel = "# Travel\n\nMedical costs abroad are covered up to 50,000 euros."
    root = write_docs(tmp_path / "kb", {"travel.md": travel})
    pool = make_pool(isolated_database_url, settings_for(isolated_database_url), name="t", min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        await ingest_paths(pool, TenantId("acme"), [root])
        async with running_app(isolated_database_url) as client:
            first = await send_for_answer(client, "kb-changes", "What are medical costs abroad covered up to?", **EN)
            assert first["status"] == "answered" and "50,000" in first["message"]["content"]
            (root / "travel.md").write_text(
                "# Travel\n\nMedical costs abroad are covered up to 80,000 euros.", encoding="utf-8"
            )
            await ingest_paths(pool, TenantId("acme"), [root])
            second = await send_for_answer(client, "kb-changes", "What are medical costs abroad covered up to?", **EN)
            assert "80,000" in second["message"]["content"] and "50,000" not in second["message"]["content"]
            (root / "travel.md").unlink()
            (root / "other.md").write_text("# Home\n\nFire is covered.", encoding="utf-8")
            await ingest_paths(pool, TenantId("acme"), [root])
            third = await send_for_answer(client, "kb-changes", "What are medical costs abroad covered up to?", **EN)
            assert third["status"] == "clarifying" and third["citations"] == []
            old = await record_of(client, "kb-changes", first["run_id"], **EN)
            changed = await record_of(client, "kb-changes", second["run_id"], **EN)
            gone = await record_of(client, "kb-changes", third["run_id"], **EN)
            [cited] = old["context"]["retrieved"]
            assert cited["chunk_id"] == first["citations"][0] and cited["document_id"] == "travel.md"
            assert "50,000 euros" in cited["text"]
            assert "80,000 euros" in changed["context"]["retrieved"][0]["text"]
            assert gone["context"]["retrieved"] == []
            # Retained threads keep what they cite; once the thread goes, so may the old version.
            await prune_superseded_chunks(pool, grace=timedelta(0))
            refs = [(c["chunk_id"], c["version"]) for r in (old, changed) for c in r["context"]["retrieved"]]
            assert len(await read_chunk_versions(pool, TenantId("acme"), refs)) == 2
            assert (await client.delete("/v1/threads/kb-changes", headers=auth(**EN))).status_code == 204
            assert await prune_superseded_chunks(pool, grace=timedelta(0)) == 2
            assert await read_chunk_versions(pool, TenantId("acme"), refs) == {}
    finally:
        await pool.close()


async def test_a_run_is_only_visible_on_its_own_thread_to_its_own_tenant(kb_database_url: str) -> None:
    async with running_app(kb_database_url) as client:
        end = await send_for_answer(client, "record-tenancy", QUESTIONS[0], **EN)
        await send_for_answer(client, "record-other-thread", QUESTIONS[0], **EN)
        run_id = end["run_id"]
        assert (await client.get(f"/v1/threads/record-tenancy/runs/{run_id}", headers=auth(**EN))).status_code == 200
        cases = [
            ("record-tenancy", run_id, auth("other-tenant", **EN)),  # another tenant's run
            ("record-other-thread", run_id, auth(**EN)),  # a run of another thread
            ("record-tenancy", str(uuid.uuid4()), auth(**EN)),  # no such run
            ("record-tenancy", "not-a-uuid", auth(**EN)),
            ("record-tenancy", run_id + "0" * 100, auth(**EN)),
            ("no-such-thread", run_id, auth(**EN)),
        ]
        for thread, run, headers in cases:
            response = await client.get(f"/v1/threads/{thread}/runs/{run}", headers=headers)
            assert response.status_code == 404, (thread, run)
            assert response.headers["content-type"].startswith("application/problem+json")
        # The same run id in upper case is the same run.
        upper = await client.get(f"/v1/threads/record-tenancy/runs/{run_id.upper()}", headers=auth(**EN))
        assert upper.status_code == 200 and upper.json()["run_id"] == run_id


async def test_a_run_in_flight_is_running_and_a_failed_one_is_an_error_with_its_input(kb_database_url: str) -> None:
    model = ScriptedChatModel(mode="hang")
    overrides = {"chat_model": model, "model_timeout_seconds": 3.0}
    async with running_app(kb_database_url, model_timeout_seconds=3.0, agent_overrides=overrides) as client:
        runs = services_of(client).runs
        run = await runs.start(
            ThreadId("record-running"), CallerContext(TenantId("acme"), UserId("u1"), "en-US"), QUESTIONS[3]
        )
        running = await record_of(client, "record-running", run.run_id, **EN)
        assert running["status"] == "running" and running["answer"] is None
        assert running["input"]["content"] == QUESTIONS[3]
        result = await run.terminal()
        assert result.event == "error" and result.data["status"] == 504
        failed = await record_of(client, "record-running", run.run_id, **EN)
    assert failed["status"] == "error" and failed["answer"] is None and failed["citations"] == []
    assert failed["input"] == running["input"]
    # What it had retrieved before the model failed, by id, resolved to the text as read.
    assert failed["context"]["retrieved"] and all(c["text"] for c in failed["context"]["retrieved"])
    # The model was given its window before it failed: the record shows it, ending on the question.
    assert failed["context"]["messages"][-1]["content"] == QUESTIONS[3]
