"""Every table of the service's own has a fixed home: the modules that may name it in a statement.

The rule (AGENTS.md, "Where SQL lives"): a feature's SQL stays in the feature that owns the
table, in the modules listed here; nothing else writes a statement on it. A new module
naming one of these tables fails here until it is the table's home, or the statement moves
home. LangGraph's tables have their own rule (tests/db/test_langgraph_tables.py).
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "chatbot"

HOMES: dict[str, frozenset[str]] = {
    "run_feedback": frozenset({"threads/queries.py"}),
    "run_rate_windows": frozenset({"threads/queries.py"}),
    "system_prompts": frozenset({"threads/queries.py"}),
    "thread_fences": frozenset({"db/locks.py"}),
    "memory_jobs": frozenset({"memory/queries.py"}),
    "memory_resets": frozenset({"memory/queries.py"}),
    "kb_documents": frozenset({"retrieval/queries.py"}),
    "kb_chunks": frozenset({"retrieval/queries.py"}),
    "kb_terms": frozenset({"retrieval/queries.py"}),
    "maintenance_leases": frozenset({"ops/queries.py"}),
    "model_usage_daily": frozenset({"db/usage_totals.py"}),
    "budgets": frozenset({"budgets/queries.py"}),
    "budget_counters": frozenset({"budgets/queries.py"}),
    "budget_reservations": frozenset({"budgets/queries.py"}),
    "thread_turns": frozenset({"recall/queries.py"}),
    "thread_terms": frozenset({"recall/queries.py"}),
}

# Statements that are away from home today, each with why; moving one home shrinks this.
STRAYS: dict[str, frozenset[str]] = {}

# Prose, not statements: a readiness example names a table in its sentence.
NOT_SQL = frozenset({"openapi_examples.py"})

STATEMENT = re.compile(rf"\b(from|into|update|join|table)\s+({'|'.join(HOMES)})\b(?!\.|/)", re.IGNORECASE)


def modules_naming_each_table() -> dict[str, set[str]]:
    """Return, per table, the source modules that name it in a statement."""
    found: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module in NOT_SQL:
            continue
        for match in STATEMENT.finditer(path.read_text("utf-8")):
            found.setdefault(match.group(2).lower(), set()).add(module)
    return found


def test_every_table_of_the_service_is_named_only_at_home() -> None:
    found = modules_naming_each_table()
    away = {
        table: sorted(modules - HOMES[table] - STRAYS.get(table, frozenset()))
        for table, modules in found.items()
        if modules - HOMES[table] - STRAYS.get(table, frozenset())
    }
    assert away == {}, "a statement away from its table's home (HOMES): move it home"


def test_the_strays_are_still_there() -> None:
    # A stray that went home must leave STRAYS too, so the list stays the honest debt.
    found = modules_naming_each_table()
    assert {t: m - found.get(t, set()) for t, m in STRAYS.items() if m - found.get(t, set())} == {}


def test_every_table_a_migration_creates_has_a_home() -> None:
    migrations = (SRC / "db" / "migrations").glob("*.sql")
    created = re.compile(r"create table if not exists (\w+)", re.IGNORECASE)
    tables = {m.lower() for path in migrations for m in created.findall(path.read_text("utf-8"))}
    assert tables == set(HOMES)
