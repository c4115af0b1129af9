"""db/langgraph_*.py: the only modules that name LangGraph's tables, and what they rely on.

Re-run on every library upgrade: the columns its statements read, `adelete_thread` emptying
the tables the thread deletion then skips, the deletes joining the caller's transaction,
and the version check that makes an upgrade come back here.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.rows import dict_row

from chatbot.db import langgraph_tables, langgraph_threads
from chatbot.db.saver import PooledPostgresSaver
from chatbot.ids import ThreadId
from tests.fixtures.catalogue import rows_of_threads

SRC = Path(__file__).resolve().parents[2] / "src" / "chatbot"
LIBRARY_TABLES = (
    "checkpoints|checkpoint_blobs|checkpoint_writes|checkpoint_migrations|store|store_vectors|store_migrations"
)
# A statement naming a table: `from`, `into`, `update`, `join`, `delete from`, `table` before it.
STATEMENT = re.compile(rf"\b(from|into|update|join|table)\s+({LIBRARY_TABLES})\b(?!\.|/)", re.IGNORECASE)

# The columns the modules' statements use, per table, at the verified versions.
USED_COLUMNS = {
    "checkpoints": {"thread_id", "checkpoint_ns", "checkpoint_id", "metadata", "checkpoint"},
    "checkpoint_blobs": {"thread_id", "checkpoint_ns", "channel", "version", "type", "blob"},
    "checkpoint_writes": {"thread_id", "checkpoint_ns", "checkpoint_id", "channel", "type", "blob"},
    "checkpoint_migrations": {"v"},
    "store": {"prefix", "key", "value", "created_at", "updated_at", "expires_at", "ttl_minutes"},
    "store_migrations": {"v"},
}


def _is_a_home(path: Path) -> bool:
    """Whether a source module may name LangGraph's tables: `db/langgraph_*.py`."""
    return path.parent == SRC / "db" and path.name.startswith("langgraph_")


def test_no_other_module_names_langgraphs_tables() -> None:
    offenders = [
        f"{path.relative_to(SRC)}: {match.group(0)}"
        for path in SRC.rglob("*.py")
        if not _is_a_home(path)
        for match in STATEMENT.finditer(path.read_text("utf-8"))
    ]
    assert offenders == []


def test_the_installed_library_is_the_verified_one_and_another_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    langgraph_tables.check_version()
    monkeypatch.setattr("chatbot.db.langgraph_tables.version", lambda _: "3.3.0")
    with pytest.raises(RuntimeError, match=r"and chatbot\.db\.saver were checked on"):
        langgraph_tables.check_version()


def test_the_columns_the_statements_use_exist(migrated_database_url: str) -> None:
    with psycopg.connect(migrated_database_url) as conn:
        for table, columns in USED_COLUMNS.items():
            rows = conn.execute(
                "select column_name from information_schema.columns "
                "where table_schema = current_schema() and table_name = %s",
                (table,),
            ).fetchall()
            assert columns <= {r[0] for r in rows}, table


async def _thread_with_rows(pool_url: str, thread_id: str) -> None:
    """Write one checkpoint with a blob and a pending write through the saver."""
    async with await psycopg.AsyncConnection.connect(pool_url, autocommit=True, row_factory=dict_row) as conn:
        saver = PooledPostgresSaver(conn)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"turn": ["a message"]}
        checkpoint["channel_versions"] = {"turn": saver.get_next_version(None, None)}
        saved = await saver.aput(config, checkpoint, {"source": "input", "step": -1}, checkpoint["channel_versions"])
        await saver.aput_writes(saved, [("turn", ["another"])], task_id="t1")


async def test_delete_thread_checkpoints_empties_every_checkpoint_table_in_the_callers_transaction(
    isolated_database_url: str,
) -> None:
    url = isolated_database_url
    await _thread_with_rows(url, "doomed")
    await _thread_with_rows(url, "kept")
    written = rows_of_threads(url, ["doomed"])
    assert all(written[t] > 0 for t in langgraph_threads.CHECKPOINT_TABLES), written

    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        with pytest.raises(RuntimeError, match="roll back"):
            async with conn.transaction():
                await langgraph_threads.delete_thread_checkpoints(conn, [ThreadId("doomed")])
                raise RuntimeError("roll back")
        assert rows_of_threads(url, ["doomed"]) == written  # the deletes were the caller's to undo
        async with conn.transaction():
            await langgraph_threads.delete_thread_checkpoints(conn, [ThreadId("doomed")])

    left = rows_of_threads(url, ["doomed"])
    assert {t: left[t] for t in langgraph_threads.CHECKPOINT_TABLES} == dict.fromkeys(
        langgraph_threads.CHECKPOINT_TABLES, 0
    )
    assert all(rows_of_threads(url, ["kept"])[t] > 0 for t in langgraph_threads.CHECKPOINT_TABLES)
