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
from typing import Literal

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
# outside a transaction block runs on the worker holding the row. Inside the checkpoint
# write's transaction (how the saver calls it) the coordinator runs it, and its one-thread
# `select ... for share` is a router query on the connection the writes then use.
DISTRIBUTED_FUNCTIONS: tuple[tuple[str, str, str], ...] = (
    ("chatbot_hold_fence(text, uuid)", "p_thread", "thread_fences"),
)


def placement_of(table: str) -> Placement | None:
    """Return a table's placement, None for a table the plan does not know."""
    return _BY_TABLE.get(table)


_BY_TABLE = {p.table: p for p in PLACEMENTS}


def _guarded(table: str, call: str) -> str:
    # Idempotent: a second `migrate --citus` leaves distributed tables as they are.
    absent = f"not exists (select 1 from pg_dist_partition where logicalrelid = '{table}'::regclass)"
    return f"select {call}\nwhere {absent};"


def citus_sql() -> str:
    """Return the SQL that places every distributed and reference table (run on the coordinator)."""
    lines = ["-- Generated from src/chatbot/db/placement.py (chatbot migrate --citus applies the same).", ""]
    anchors: dict[str, str] = {}
    for p in PLACEMENTS:
        if p.kind == "local":
            continue
        lines.append(f"-- {p.table}: {p.reason}")
        if p.kind == "reference":
            lines.append(_guarded(p.table, f"create_reference_table('{p.table}')"))
        else:
            assert p.group is not None and p.column is not None
            colocate = anchors.setdefault(p.group, p.table)
            with_ = "none" if colocate == p.table else colocate
            lines.append(
                _guarded(p.table, f"create_distributed_table('{p.table}', '{p.column}', colocate_with => '{with_}')")
            )
        lines.append("")
    for signature, argument, table in DISTRIBUTED_FUNCTIONS:
        lines.append(f"-- {signature}: co-located with {table} by {argument}")
        lines.append(f"select create_distributed_function('{signature}', '{argument}', colocate_with => '{table}');")
    return "\n".join(lines) + "\n"


class CitusMissing(RuntimeError):
    """The database has no citus extension: there is nothing to place the tables on."""


async def apply_placement(conninfo: str) -> None:
    """Distribute the tables as `PLACEMENTS` says, on a migrated Citus coordinator (idempotent)."""
    from psycopg import AsyncConnection

    async with await AsyncConnection.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        found = await (await conn.execute("select 1 from pg_extension where extname = 'citus'")).fetchone()
        if found is None:
            raise CitusMissing("the database has no citus extension: run `create extension citus` on the coordinator")
        await conn.execute(citus_sql().encode())
