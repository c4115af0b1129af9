"""Threads and memory written by the pinned library versions stay readable after an upgrade.

The rows in tests/fixtures/stored_format/ were written through the API by the versions in
its manifest.json (see make_fixture.py). Loaded into a database migrated by the versions
installed now, the API must read back the same transcript and memory, rebuild the same
model state for a new run (recent messages from the `messages` DeltaChannel's snapshot and
writes, the rolling summary, the profile), and carry on the thread. An upgrade of
langgraph, langgraph-checkpoint or langgraph-checkpoint-postgres that changes how any of
this is stored or read fails here, before it fails on a customer's thread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tests.fixtures.app import running_app
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.stored_format.make_fixture import EN, READ_SETTINGS, TABLES, USER, all_messages, memory, say
from tests.fixtures.tokens import auth

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stored_format"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "manifest.json").read_text("utf-8"))
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "expected.json").read_text("utf-8"))


async def load_rows(database_url: str) -> dict[str, int]:
    """Copy the fixture rows into LangGraph's tables; return how many rows each table got."""
    counts: dict[str, int] = {}
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        for table in TABLES:
            # The columns as written: a column the new version added must have a default, a
            # column it dropped or renamed fails the copy (both are stored-format changes).
            query = sql.SQL("copy {table} ({cols}) from stdin").format(
                table=sql.Identifier(table),
                cols=sql.SQL(", ").join(map(sql.Identifier, MANIFEST["columns"][table])),
            )
            async with conn.cursor() as cur:
                async with cur.copy(query) as copy:
                    await copy.write((FIXTURES / f"{table}.copy").read_bytes())
                counts[table] = cur.rowcount
    return counts


async def test_a_thread_and_memory_written_by_the_pinned_versions_read_back_and_carry_on(
    isolated_database_url: str,
) -> None:
    await load_demo_kb(isolated_database_url, MANIFEST["tenant_id"])
    counts = await load_rows(isolated_database_url)
    assert all(counts[table] > 0 for table in TABLES), counts
    async with running_app(isolated_database_url, **READ_SETTINGS) as client:
        transcript = await all_messages(client)
        assert transcript == EXPECTED["messages"]
        assert len(transcript) > 50  # enough runs for a DeltaChannel snapshot (agent/state.py)
        caller = auth(MANIFEST["tenant_id"], USER, locale=EN)
        newest = await client.get(f"/v1/threads/{MANIFEST['thread_id']}/messages", headers=caller)
        assert newest.json()["messages"] == EXPECTED["messages"][-20:]

        remembered = await memory(client)
        # Facts stored before sources were kept read with `source` null, the rest unchanged.
        assert all(fact.pop("source") is None for fact in remembered["facts"])
        assert remembered == EXPECTED["memory"]
        assert any("Peugeot 206" in fact["text"] for fact in remembered["facts"])

        # The new run's state is rebuilt from the old rows: the hand-off context quotes the
        # recent messages, the rolling summary and the profile exactly as before the upgrade.
        escalation = EXPECTED["escalation"]
        end = await say(client, escalation["message"], escalation["locale"])
        assert end["status"] == "escalate"
        assert end["handoff_context"] == escalation["handoff_context"]
        assert end["handoff_context"]["conversation_summary"]

        question = "How do I file a car body claim and which documents do I need?"
        answered = await say(client, question, EN)
        assert answered["status"] == "answered" and answered["citations"]

        after = await all_messages(client)
    assert after[: len(transcript)] == transcript
    assert [(m["role"], m["content"], m["run_id"]) for m in after[len(transcript) :]] == [
        ("user", escalation["message"], end["run_id"]),
        ("assistant", end["message"]["content"], end["run_id"]),
        ("user", question, answered["run_id"]),
        ("assistant", answered["message"]["content"], answered["run_id"]),
    ]
