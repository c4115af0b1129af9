"""Where every table lives on a Citus cluster, and the SQL that puts it there.

One list, read three ways: `chatbot migrate --citus` applies `citus_sql()` on a Citus
coordinator, deploy/citus/placement.sql is the same SQL for operators who apply it by hand
(a test keeps the two equal), and the statement audit of the test suite holds every
statement the service sends against it (a statement on a distributed table names its
distribution column by equality on the run path).

Kinds:
- distributed: sharded by `column`; tables of one `group` are co-located (the same value of
  the column lands on the same worker), so a transaction naming one value is one shard.
- reference: a full copy on every node; small, rarely written, read beside anything.
- local: a plain table on the coordinator, never joined with a distributed table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["distributed", "reference", "local"]


@dataclass(frozen=True, slots=True)
class Placement:
    """One table's place on a Citus cluster, and why."""

    table: str
    kind: Kind
    column: str | None
    group: str | None
    reason: str


def _thread(table: str, reason: str) -> Placement:
    return Placement(table, "distributed", "thread_id", "thread", reason)


def _tenant(table: str, reason: str) -> Placement:
    return Placement(table, "distributed", "tenant_id", "tenant", reason)


PLACEMENTS: tuple[Placement, ...] = (
    # Per-thread data: a run's whole transaction (fence check and checkpoint write) is one shard.
    _thread("checkpoints", "every saver statement names one thread_id"),
    _thread("checkpoint_blobs", "written and read with the thread's checkpoints"),
    _thread("checkpoint_writes", "written and read with the thread's checkpoints"),
    _thread("thread_fences", "the fence check shares the checkpoint write's transaction"),
    _thread("run_feedback", "feedback checks its run in the thread's checkpoints"),
    _thread("memory_jobs", "inserted by the run's last node, deleted with the memory write, per thread"),
    _thread("thread_turns", "recall indexes and searches one thread's turns beside its checkpoints"),
    _thread("thread_terms", "the term frequencies of one thread's turns, written and read with them"),
    # Per-tenant data: one tenant's search, counters and usage are one shard.
    _tenant("kb_documents", "an ingest writes one tenant's documents"),
    _tenant("kb_chunks", "search reads one tenant's chunks; its foreign key to kb_documents includes tenant_id"),
    _tenant("kb_terms", "search reads one tenant's vocabulary"),
    _tenant("run_rate_windows", "one user's window is one row, counted on every run"),
    _tenant("model_usage_daily", "one upsert per model call, naming the tenant"),
    _tenant("memory_resets", "read by the user's memory writes, keyed by (tenant, user)"),
    _tenant("budgets", "a model call's check reads its tenant's budgets, user budgets included"),
    _tenant("budget_counters", "a reservation locks its tenant's and its user's counters in one shard"),
    _tenant("budget_reservations", "written and summed beside the counters they hold against"),
    # The store's primary key is (prefix, key): its distribution column must be in it.
    Placement("store", "distributed", "prefix", "store", "one namespace (tenant, user, kind) is one shard"),
    # Rarely written, read beside any thread: a copy on every node.
    Placement("system_prompts", "reference", None, None, "a handful of rows, written once per prompt text"),
    # The coordinator's own: never read by a run, never joined with a distributed table.
    Placement(
        "maintenance_leases", "local", None, None, "one row per periodic job, timed by the coordinator's one clock"
    ),
    Placement("checkpoint_migrations", "local", None, None, "read by `migrate` and readiness only"),
    Placement("store_migrations", "local", None, None, "read by `migrate` and readiness only"),
    Placement("chatbot_schema_migrations", "local", None, None, "read by `migrate` and readiness only"),
)

# Functions that read a distributed table: registered co-located with it, so a call made
# outside a transaction block runs on the worker holding the row, in one step. Inside the
# checkpoint write's transaction (how the saver calls `chatbot_hold_fence`) the coordinator
# runs it, and its one-thread `select ... for share` is a router query on the connection the
# writes then use. `chatbot_set_fence` is called on the lock session, outside a transaction.
DISTRIBUTED_FUNCTIONS: tuple[tuple[str, str, str], ...] = (
    ("chatbot_hold_fence(text, uuid)", "p_thread", "thread_fences"),
    ("chatbot_set_fence(text, uuid)", "p_thread", "thread_fences"),
    (
        "chatbot_budget_reserve(text, text, uuid, bigint, numeric, date, date, timestamptz, timestamptz)",
        "p_tenant",
        "budgets",
    ),
    ("chatbot_budget_settle(text, uuid, bigint, numeric)", "p_tenant", "budgets"),
    (
        "chatbot_budget_hold(text, text, uuid, bigint, numeric, bigint, bigint, numeric, boolean, date, date, "
        "timestamptz, timestamptz)",
        "p_tenant",
        "budgets",
    ),
)


def placement_of(table: str) -> Placement | None:
    """Return a table's placement, None for a table the plan does not know."""
    return _BY_TABLE.get(table)


_BY_TABLE = {p.table: p for p in PLACEMENTS}


def _guarded(table: str, call: str) -> str:
    # Idempotent: a second `migrate --citus` leaves distributed tables as they are.
    absent = f"not exists (select 1 from pg_dist_partition where logicalrelid = '{table}'::regclass)"
    return f"select {call}\nwhere {absent};"


def _function_guarded(signature: str, call: str) -> str:
    # Idempotent too: a function already distributed (it has a distribution argument) is left alone.
    absent = (
        "not exists (select 1 from pg_dist_object where classid = 'pg_proc'::regclass"
        f" and objid = '{signature}'::regprocedure and distribution_argument_index is not null)"
    )
    return f"select {call}\nwhere {absent};"


def placement_statements() -> list[tuple[str, str]]:
    """Return (comment, statement) for every distributed table, reference table and function, in order.

    Each statement is idempotent and is sent on its own (`apply_placement`): Citus refuses a
    function's distribution in a transaction that has already distributed a table in parallel.
    """
    statements: list[tuple[str, str]] = []
    anchors: dict[str, str] = {}
    for p in PLACEMENTS:
        if p.kind == "local":
            continue
        if p.kind == "reference":
            statements.append((f"{p.table}: {p.reason}", _guarded(p.table, f"create_reference_table('{p.table}')")))
            continue
        assert p.group is not None and p.column is not None
        colocate = anchors.setdefault(p.group, p.table)
        with_ = "none" if colocate == p.table else colocate
        call = f"create_distributed_table('{p.table}', '{p.column}', colocate_with => '{with_}')"
        statements.append((f"{p.table}: {p.reason}", _guarded(p.table, call)))
    for signature, argument, table in DISTRIBUTED_FUNCTIONS:
        call = f"create_distributed_function('{signature}', '{argument}', colocate_with => '{table}')"
        statements.append((f"{signature}: co-located with {table} by {argument}", _function_guarded(signature, call)))
    return statements


def citus_sql() -> str:
    """Return the SQL that places every distributed and reference table (deploy/citus/placement.sql).

    Regenerate the file after changing `PLACEMENTS` (tests/db/test_statement_audit.py fails
    until it matches): `python -c "from chatbot.db.placement import citus_sql; print(citus_sql(), end='')"
    > deploy/citus/placement.sql`.
    """
    lines = [
        "-- Generated from src/chatbot/db/placement.py (chatbot migrate --citus applies the same).",
        "-- Apply with psql (autocommit: each statement on its own), on the coordinator, in the",
        "-- service's database, after `chatbot migrate` and after registering the workers in that",
        "-- database (citus_add_node: the node list is per database).",
        "",
    ]
    for comment, statement in placement_statements():
        lines += [f"-- {comment}", statement, ""]
    return "\n".join(lines)


class CitusMissing(RuntimeError):
    """The database cannot take the placement: no citus extension, no workers, or tables without a placement."""


# Citus' metadata: the primary workers registered in *this* database (group 0 is the coordinator).
_WORKERS = (
    "select count(*) as n from pg_dist_node where groupid <> 0 and noderole = 'primary' and isactive"
    " and shouldhaveshards"
)
_TABLES = "select tablename from pg_tables where schemaname = 'public'"


async def apply_placement(conninfo: str) -> list[str]:
    """Distribute the tables as `PLACEMENTS` says, on a migrated Citus coordinator (idempotent).

    Refuses (`CitusMissing`, before changing anything) a database without the citus
    extension, one where no worker is registered (Citus would put every shard on the
    coordinator), and one with a table the plan does not name. Returns the tables and
    functions placed by this call (empty when everything already was).
    """
    from psycopg import AsyncConnection

    async with await AsyncConnection.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        found = await (await conn.execute("select 1 from pg_extension where extname = 'citus'")).fetchone()
        if found is None:
            raise CitusMissing("the database has no citus extension: run `create extension citus` on the coordinator")
        workers = await (await conn.execute(_WORKERS)).fetchone()
        if workers is None or not workers[0]:
            raise CitusMissing(
                "no Citus workers are registered in this database: run `select citus_add_node(host, port)` "
                "for each worker in it first (the node list is per database)"
            )
        unplaced = sorted(str(r[0]) for r in await (await conn.execute(_TABLES)).fetchall() if not placement_of(r[0]))
        if unplaced:
            raise CitusMissing(
                f"tables without a placement: {', '.join(unplaced)}: name each one's distribution column "
                "in src/chatbot/db/placement.py (docs/scaling.md)"
            )
        before = await _placed(conn)
        for _, statement in placement_statements():
            await conn.execute(statement.encode())
        return sorted(await _placed(conn) - before)


async def _placed(conn: Any) -> set[str]:
    tables = await (await conn.execute("select logicalrelid::regclass::text from pg_dist_partition")).fetchall()
    functions = await (
        await conn.execute(
            "select objid::regprocedure::text from pg_dist_object"
            " where classid = 'pg_proc'::regclass and distribution_argument_index is not null"
        )
    ).fetchall()
    return {str(r[0]) for r in (*tables, *functions)}
