"""`chatbot migrate --citus` on a real Citus coordinator (`make test-citus`; skipped elsewhere).

It places every table as src/chatbot/db/placement.py says, on a fresh database and on one
migrated earlier, statement by statement (Citus refuses the placement as one transaction),
does nothing the second time, and refuses a database in which no worker is registered (the
node list is per database) instead of putting every shard on the coordinator.
"""

from __future__ import annotations

import psycopg
import pytest
from typer.testing import CliRunner

from chatbot.cli.main import app as cli
from chatbot.db.placement import DISTRIBUTED_FUNCTIONS, PLACEMENTS
from tests.fixtures.postgres import citus_workers


@pytest.fixture
def workers(pg_server_url: str) -> tuple[tuple[str, int], ...]:
    found = citus_workers(pg_server_url)
    if not found:
        pytest.skip("needs a Citus coordinator with workers: make test-citus (docs/scaling.md)")
    return found


def _migrate(url: str, *args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["migrate", *args], env={"CHATBOT_DATABASE_URL": url})
    return done.exit_code, done.output


def _placed(url: str) -> dict[str, tuple[str, str | None]]:
    """Return each Citus table: (distributed|reference, its distribution column)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select logicalrelid::regclass::text, partmethod, column_to_column_name(logicalrelid, partkey)"
            " from pg_dist_partition"
        ).fetchall()
    return {t: ("reference" if m == "n" else "distributed", c) for t, m, c in rows}


def _shard_ports(url: str) -> set[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select distinct nodeport from pg_dist_shard_placement p join pg_dist_shard s using (shardid)"
            " join pg_dist_partition d using (logicalrelid) where d.partmethod = 'h'"
        ).fetchall()
    return {int(r[0]) for r in rows}


def _expected() -> dict[str, tuple[str, str | None]]:
    return {p.table: (p.kind, p.column) for p in PLACEMENTS if p.kind != "local"}


def test_migrate_citus_places_a_fresh_database_once_and_every_shard_on_the_workers(
    workers: tuple[tuple[str, int], ...], fresh_database_url: str
) -> None:
    code, output = _migrate(fresh_database_url, "--citus")
    assert code == 0, output
    assert _placed(fresh_database_url) == _expected()
    assert _shard_ports(fresh_database_url) == {port for _, port in workers}
    with psycopg.connect(fresh_database_url) as conn:
        functions = conn.execute(
            "select objid::regprocedure::text from pg_dist_object"
            " where classid = 'pg_proc'::regclass and distribution_argument_index is not null"
        ).fetchall()
        # Postgres' own spelling of each signature (`timestamptz` reads `timestamp with time zone`).
        signatures = [s for s, _, _ in DISTRIBUTED_FUNCTIONS]
        spelt = conn.execute("select array(select unnest(%s::text[])::regprocedure::text)", (signatures,)).fetchone()
        assert spelt is not None
        expected = set(spelt[0])
    assert {f[0] for f in functions} == expected
    code, output = _migrate(fresh_database_url, "--citus")
    assert code == 0 and "placed: nothing (every table already placed)" in output, output


def test_migrate_citus_places_a_database_migrated_before(
    workers: tuple[tuple[str, int], ...], fresh_database_url: str
) -> None:
    assert _migrate(fresh_database_url)[0] == 0
    assert _placed(fresh_database_url) == {}
    code, output = _migrate(fresh_database_url, "--citus")
    assert code == 0, output
    assert _placed(fresh_database_url) == _expected()


def test_migrate_citus_refuses_a_database_without_workers(
    workers: tuple[tuple[str, int], ...], fresh_database_url: str
) -> None:
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        for host, port in workers:
            conn.execute("select citus_remove_node(%s, %s)", (host, port))
    code, output = _migrate(fresh_database_url, "--citus")
    assert code == 1
    assert "no Citus workers are registered in this database" in output
    assert len(output.strip().splitlines()) == 2, output  # what was migrated, then the one-line refusal
    assert _placed(fresh_database_url) == {}  # nothing landed on the coordinator
