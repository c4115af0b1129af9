"""Migration 0012 gives stored recall rows their thread's owner, and drops rows of threads that are gone."""

from __future__ import annotations

from pathlib import Path

import psycopg

from tests.fixtures.app import running_app
from tests.fixtures.messages import send_for_answer

MIGRATION = Path(__file__).resolve().parents[2] / "src" / "chatbot" / "db" / "migrations" / "0012_recall_owner.sql"
LEGACY_TURN = """
insert into thread_turns (thread_id, position, message_id, role, content, terms, length, novel)
values (%s, 0, %s, 'user', %s, %s::tsvector, 1, 1)
"""


async def test_stored_rows_take_their_threads_owner_and_rows_of_gone_threads_go(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url) as client:
        await send_for_answer(client, "kept", "Which documents do I need for a claim?", tenant="t9", user_id="u9")
    with psycopg.connect(url, autocommit=True) as conn:
        # The table as it was before the migration, holding rows of a live thread and of a gone one.
        conn.execute("alter table thread_turns drop column tenant_id, drop column user_id")
        for thread, text in (("kept", "claim documents"), ("gone", "policy code GN5521")):
            conn.execute(LEGACY_TURN, (thread, f"m-{thread}", text, "'claim':1"))
            conn.execute("insert into thread_terms (thread_id, term, turns) values (%s, 'claim', 1)", (thread,))
        conn.execute(MIGRATION.read_text("utf-8"))
        rows = conn.execute("select thread_id, tenant_id, user_id from thread_turns order by thread_id").fetchall()
        terms = conn.execute("select thread_id from thread_terms order by thread_id").fetchall()
    assert rows == [("kept", "t9", "u9")]
    assert terms == [("kept",)]
