"""Every statement of recall routes to the thread's shard, the nearest-turns search too.

The statement audit (tests/db/test_statement_audit.py) holds what a driven run sends; the
nearest-turns search runs only with an embeddings model, which that drive has none of, so
recall's statements are held to the same rules here, as text.
"""

from __future__ import annotations

import re

import pytest

from chatbot.recall import queries
from tests.db.statement_rules import StatementAudit

STATEMENTS = {
    name: getattr(queries, name)
    for name in dir(queries)
    if name.isupper() and isinstance(getattr(queries, name), str) and not name.startswith("_")
}


def _positional(text: str) -> str:
    """Return the statement with psycopg's placeholders as Postgres' own ($1, $2...)."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        key = match.group(1) or f"#{len(names)}"
        return f"${names.setdefault(key, len(names) + 1)}"

    return re.sub(r"%\((\w+)\)s|%s", number, text)


# Erasure's and retention's scans for a thread's index by owner and by id: rare work that
# spans shards, like their scans of checkpoints (docs/scaling.md).
RARE = frozenset({"INDEXED_FOR", "INDEXED_AFTER"})


def test_every_recall_statement_is_checked() -> None:
    assert {"SEARCH_TURNS", "NEAREST_TURNS", "INSERT_TURN", "ADD_TERM", "TURNS_BY_ID"} <= set(STATEMENTS)
    assert RARE <= set(STATEMENTS)


@pytest.mark.parametrize("name", sorted(set(STATEMENTS) - RARE))
def test_the_statement_is_a_router_statement_on_the_run_path(name: str) -> None:
    audit = StatementAudit({"now": "s"})
    assert audit.check(_positional(STATEMENTS[name]), "run") == []


@pytest.mark.parametrize("name", sorted(RARE))
def test_the_rare_statement_passes_the_rules_of_rare_work(name: str) -> None:
    audit = StatementAudit({"now": "s"})
    assert audit.check(_positional(STATEMENTS[name]), "rare") == []
