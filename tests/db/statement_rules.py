"""The rules of the statement audit: what Citus refuses, and what routes to one shard.

Each recorded statement is parsed with Postgres' own parser (pglast) and held against the
placement (src/chatbot/db/placement.py) and the parts of Citus' planner that refuse a
statement outright (multi_router_planner.c: ErrorIfOnConflictNotSupported,
TargetlistAndFunctionsSupported):
- no non-IMMUTABLE function in `ON CONFLICT ... DO UPDATE SET` (a plain column excepted),
  in the `ON CONFLICT` WHERE, or in a modification's RETURNING;
- no VOLATILE function in an UPDATE or DELETE, and no STABLE function fed by a column in
  an UPDATE's SET or a modification's WHERE;
- no writing CTE beside writes to tables of another co-location group;
- no catalog read (pg_locks and the like) or coordinator-local table in a statement with a
  distributed table.
On the run path and the page reads, every distributed table a statement reads or writes
must have its distribution column equal to a parameter or a constant (directly, or through
an equality with the column of a co-located table of the same query level that is), in the
conjunctive part of the WHERE or a join condition: a router statement, one shard. A
correlated subquery is no exception: its tables need an equality of their own, since an
equality with the outer query's column (`bl.thread_id = checkpoints.thread_id`) makes Citus
run the subquery on every shard (a real cluster showed it: tests/db/test_statement_audit.py
checks the audit against the cluster's counts under `make test-citus`).

Function volatility is read from the audit's own Postgres (`pg_proc`), by name: a name with
any non-IMMUTABLE overload counts as non-IMMUTABLE. Operators and casts are not checked
(`timestamptz + interval` is STABLE); a real cluster is the judge of those.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

from pglast import ast, parse_sql
from pglast.visitors import Skip, Visitor

from chatbot.db.placement import Placement, placement_of

Path = Literal["run", "page", "rare"]
Volatility = Mapping[str, str]  # function name -> 'i', 's' or 'v' (the most volatile overload)

# Catalog relations whose rows are per node on Citus.
CATALOG_PREFIXES = ("pg_", "information_schema")
FUNCTION_PARAMETER_PREFIX = "p_"
TIME_VALUE_FUNCTIONS = "s"  # CURRENT_TIMESTAMP, CURRENT_DATE, LOCALTIMESTAMP...: STABLE


@dataclass(frozen=True, slots=True)
class Finding:
    """One statement that Citus would refuse, or that would not route to one shard."""

    rule: str
    statement: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.detail}\n    {' '.join(self.statement.split())[:400]}"


@dataclass(slots=True)
class _Occurrence:
    """One table named in a statement, under its alias."""

    table: str
    alias: str
    placement: Placement | None
    scope: int
    routed: bool = False


@dataclass(slots=True)
class _Scope:
    ident: int
    parent: _Scope | None
    names: dict[str, _Occurrence] = field(default_factory=dict)

    def lookup(self, alias: str) -> _Occurrence | None:
        scope: _Scope | None = self
        while scope is not None:
            if alias in scope.names:
                return scope.names[alias]
            scope = scope.parent
        return None

    def by_column(self, column: str) -> _Occurrence | None:
        scope: _Scope | None = self
        while scope is not None:
            hits = [o for o in scope.names.values() if o.placement is not None and o.placement.column == column]
            if len(hits) == 1:
                return hits[0]
            if hits:
                return None
            scope = scope.parent
        return None


def _is(node: Any, *kinds: str) -> bool:
    """Tell whether a parse node is of one of the named kinds (pglast's nodes, read untyped)."""
    return type(node).__name__ in kinds


def _is_constant(node: Any) -> bool:
    if _is(node, "TypeCast"):
        return _is_constant(node.arg)
    if _is(node, "ColumnRef"):
        # Inside our SQL functions, parameters are named p_*: a value per call, like $1.
        names = [f.sval for f in node.fields if _is(f, "String")]
        return len(names) == 1 and names[0].startswith(FUNCTION_PARAMETER_PREFIX)
    return _is(node, "ParamRef", "A_Const")


def _column(node: Any) -> tuple[str | None, str] | None:
    if _is(node, "TypeCast"):
        return _column(node.arg)
    if not _is(node, "ColumnRef"):
        return None
    names = [f.sval for f in node.fields if _is(f, "String")]
    if not names:
        return None
    return (names[-2] if len(names) >= 2 else None, names[-1])


def _conjuncts(node: Any) -> Iterator[Any]:
    """Yield the parts of an AND tree (an OR's branches are not conjuncts)."""
    if _is(node, "BoolExpr") and node.boolop.name == "AND_EXPR":
        for arg in node.args:
            yield from _conjuncts(arg)
    elif node is not None:
        yield node


def _equalities(node: Any) -> Iterator[tuple[Any, Any]]:
    for part in _conjuncts(node):
        if _is(part, "A_Expr") and part.kind.name == "AEXPR_OP" and [n.sval for n in part.name] == ["="]:
            yield part.lexpr, part.rexpr


def _function_names(node: Any) -> Iterator[tuple[str, Any]]:
    """Yield (name, call) for every function call and time value function under `node`."""

    class _Calls(Visitor):
        def __init__(self) -> None:
            self.found: list[tuple[str, Any]] = []

        def visit_FuncCall(self, ancestors: Any, call: Any) -> None:
            self.found.append((call.funcname[-1].sval, call))

        def visit_SQLValueFunction(self, ancestors: Any, call: Any) -> None:
            self.found.append((f"<{call.op.name}>", call))

    if node is None:
        return
    visitor = _Calls()
    visitor(node)
    yield from visitor.found


def _volatility(name: str, volatility: Volatility) -> str:
    if name.startswith("<"):
        return TIME_VALUE_FUNCTIONS
    return volatility.get(name, "i")


def _has_column(node: Any) -> bool:
    class _Columns(Visitor):
        found = False

        def visit_ColumnRef(self, ancestors: Any, ref: Any) -> None:
            self.found = True

    visitor = _Columns()
    visitor(node)
    return visitor.found


_ARITHMETIC = frozenset({"+", "-", "*", "/", "||"})


def _stable_fed_by_column(node: Any, volatility: Volatility) -> str | None:
    """Return the name of a non-IMMUTABLE function whose value is computed with a column.

    A function with a column among its arguments, or arithmetic between a time function's
    value and a column (`now() + ttl * interval '1 minute'`: timestamptz plus interval is
    STABLE). A comparison with now() (`expires_at < now()`) is IMMUTABLE and passes.
    """
    for name, call in _function_names(node):
        if _volatility(name, volatility) != "i" and _is(call, "FuncCall"):
            if any(_has_column(arg) for arg in call.args or ()):
                return name

    class _Arithmetic(Visitor):
        def __init__(self) -> None:
            self.found: str | None = None

        def visit_A_Expr(self, ancestors: Any, expr: Any) -> None:
            if expr.kind.name != "AEXPR_OP" or [n.sval for n in expr.name][-1] not in _ARITHMETIC:
                return
            for side, other in ((expr.lexpr, expr.rexpr), (expr.rexpr, expr.lexpr)):
                mutable = _first_mutable(side, volatility) if side is not None else None
                if mutable and other is not None and _has_column(other):
                    self.found = mutable

    if node is None:
        return None
    visitor = _Arithmetic()
    visitor(node)
    return visitor.found


def _first_mutable(node: Any, volatility: Volatility, *, worst: str = "s") -> str | None:
    order = {"i": 0, "s": 1, "v": 2}
    for name, _ in _function_names(node):
        if order[_volatility(name, volatility)] >= order[worst]:
            return name
    return None


def _citus_table(occurrence: _Occurrence | None) -> TypeGuard[_Occurrence]:
    """Tell whether Citus plans statements on this table (local tables are plain Postgres)."""
    return occurrence is not None and occurrence.placement is not None and occurrence.placement.kind != "local"


class StatementAudit:
    """Hold statements against the placement and Citus' refusals."""

    def __init__(self, volatility: Volatility) -> None:
        self.volatility = volatility

    def check(self, text: str, path: Path) -> list[Finding]:
        """Return what is wrong with one statement on the given path (nothing when it is fine)."""
        try:
            parsed = parse_sql(text)
        except Exception as exc:
            return [Finding("unparsed", text, str(exc))]
        findings: list[Finding] = []
        for raw in parsed:
            findings.extend(_Checker(self, text, path).statement(raw.stmt))
        return findings

    def distributed_tables(self, text: str) -> list[str]:
        """Return the distributed tables a statement names (none when it does not parse)."""
        try:
            parsed = parse_sql(text)
        except Exception:
            return []
        names: set[str] = set()
        for raw in parsed:
            checker = _Checker(self, text, "rare")
            checker.walk(raw.stmt, None)
            names.update(o.table for o in checker.occurrences if o.placement and o.placement.kind == "distributed")
        return sorted(names)


class _Checker:
    def __init__(self, audit: StatementAudit, text: str, path: Path) -> None:
        self.audit = audit
        self.text = text
        self.path = path
        self.findings: list[Finding] = []
        self.occurrences: list[_Occurrence] = []
        self.links: list[tuple[Any, Any]] = []  # (occurrence or "const", occurrence)
        self.written: list[_Occurrence] = []
        self.catalog: list[str] = []
        self.cte_names: set[str] = set()
        self.cte_writes = 0
        self._scopes = 0

    def fail(self, rule: str, detail: str) -> None:
        self.findings.append(Finding(rule, self.text, detail))

    # --- walking --------------------------------------------------------------------

    def statement(self, stmt: Any) -> list[Finding]:
        self.walk(stmt, None)
        self.judge()
        return self.findings

    def new_scope(self, parent: _Scope | None) -> _Scope:
        self._scopes += 1
        return _Scope(self._scopes, parent)

    def relation(self, rv: Any, scope: _Scope) -> _Occurrence | None:
        if rv is None:
            return None
        name = str(rv.relname)
        if rv.schemaname is None and name in self.cte_names:
            return None
        if (rv.schemaname or "").startswith("pg_") or name.startswith(CATALOG_PREFIXES):
            self.catalog.append(name)
        alias = str(rv.alias.aliasname) if rv.alias is not None else name
        occurrence = _Occurrence(name, alias, placement_of(name), scope.ident)
        scope.names[alias] = occurrence
        self.occurrences.append(occurrence)
        return occurrence

    def walk(self, node: Any, parent: _Scope | None) -> None:
        if _is(node, "SelectStmt"):
            self.select(node, parent)
        elif _is(node, "InsertStmt"):
            self.insert(node, parent)
        elif _is(node, "UpdateStmt"):
            self.update(node, parent)
        elif _is(node, "DeleteStmt"):
            self.delete(node, parent)
        elif node is not None:
            # Utility statements (DDL, SET, transaction control) carry no routing question.
            return

    def with_clause(self, clause: Any, scope: _Scope) -> None:
        if clause is None:
            return
        for cte in clause.ctes:
            self.cte_names.add(cte.ctename)
        for cte in clause.ctes:
            query = cte.ctequery
            if _is(query, "InsertStmt", "UpdateStmt", "DeleteStmt"):
                self.cte_writes += 1
            self.walk(query, scope)

    def sublinks(self, node: Any, scope: _Scope) -> None:
        """Walk the subqueries under an expression, in a scope below `scope`."""
        if node is None:
            return

        class _Sub(Visitor):
            def __init__(self) -> None:
                self.found: list[Any] = []

            def visit_SubLink(self, ancestors: Any, link: Any) -> Any:
                self.found.append(link.subselect)
                return Skip

        visitor = _Sub()
        visitor(node)
        for sub in visitor.found:
            self.walk(sub, scope)

    def from_item(self, item: Any, scope: _Scope) -> None:
        if _is(item, "RangeVar"):
            self.relation(item, scope)
        elif _is(item, "JoinExpr"):
            self.from_item(item.larg, scope)
            self.from_item(item.rarg, scope)
            self.quals(item.quals, scope)
        elif _is(item, "RangeSubselect"):
            self.walk(item.subquery, scope)
        elif _is(item, "RangeFunction"):
            self.sublinks(item.functions, scope)

    def quals(self, node: Any, scope: _Scope) -> None:
        if node is None:
            return
        for left, right in _equalities(node):
            self.link(left, right, scope)
        self.sublinks(node, scope)

    def resolve(self, ref: tuple[str | None, str], scope: _Scope) -> _Occurrence | None:
        alias, column = ref
        occurrence = scope.lookup(alias) if alias else scope.by_column(column)
        if occurrence is None or occurrence.placement is None or occurrence.placement.column != column:
            return None
        return occurrence

    def link(self, left: Any, right: Any, scope: _Scope) -> None:
        for a, b in ((left, right), (right, left)):
            column = _column(a)
            if column is None:
                continue
            occurrence = self.resolve(column, scope)
            if occurrence is None:
                continue
            if _is_constant(b):
                self.links.append(("const", occurrence))
            else:
                other_column = _column(b)
                other = self.resolve(other_column, scope) if other_column else None
                if other is not None and other.placement is not None and occurrence.placement is not None:
                    # A correlation (a subquery's table equal to an outer query's) does not route:
                    # Citus prunes each table by its own restrictions, and `bl.thread_id =
                    # checkpoints.thread_id` in a subquery gives it none, so the subquery runs on
                    # every shard. Only a join in one FROM carries the value across.
                    if other.placement.group == occurrence.placement.group and other.scope == occurrence.scope:
                        self.links.append((other, occurrence))

    def select(self, stmt: ast.SelectStmt, parent: _Scope | None) -> None:
        scope = self.new_scope(parent)
        self.with_clause(stmt.withClause, scope)
        if stmt.op is not None and stmt.op.name != "SETOP_NONE" and stmt.larg:
            self.walk(stmt.larg, parent)
            self.walk(stmt.rarg, parent)
            return
        for item in stmt.fromClause or ():
            self.from_item(item, scope)
        self.quals(stmt.whereClause, scope)
        self.sublinks(stmt.targetList, scope)
        self.sublinks(stmt.havingClause, scope)
        for values in stmt.valuesLists or ():
            self.sublinks(values, scope)

    def insert(self, stmt: ast.InsertStmt, parent: _Scope | None) -> None:
        scope = self.new_scope(parent)
        self.with_clause(stmt.withClause, scope)
        target = self.relation(stmt.relation, scope)
        if target is not None:
            self.written.append(target)
        columns = [c.name for c in stmt.cols or ()]
        source: Any = stmt.selectStmt
        if target is not None and target.placement is not None and target.placement.kind == "distributed":
            position = columns.index(target.placement.column) if target.placement.column in columns else None
            if _is(source, "SelectStmt") and source.valuesLists:
                rows = source.valuesLists
                if position is not None and len(rows) == 1 and _is_constant(rows[0][position]):
                    self.links.append(("const", target))
                self.sublinks(rows, scope)
            elif source is not None:
                if self.path != "rare":
                    self.fail("insert-select", f"INSERT ... SELECT into {target.table} on the {self.path} path")
                self.walk(source, scope)
        elif source is not None:
            self.walk(source, scope)
        conflict = stmt.onConflictClause
        if conflict is not None and _citus_table(target):
            for entry in conflict.targetList or ():
                if _is(entry.val, "ColumnRef"):
                    continue
                name = _first_mutable(entry.val, self.audit.volatility)
                if name:
                    self.fail("do-update-set", f"{name} in DO UPDATE SET {entry.name} of {target.table}")
            name = _first_mutable(conflict.whereClause, self.audit.volatility)
            if name:
                self.fail("on-conflict-where", f"{name} in the ON CONFLICT WHERE of {target.table}")
        self.returning(stmt.returningClause, target)

    def update(self, stmt: ast.UpdateStmt, parent: _Scope | None) -> None:
        scope = self.new_scope(parent)
        self.with_clause(stmt.withClause, scope)
        target = self.relation(stmt.relation, scope)
        if target is not None:
            self.written.append(target)
        for item in stmt.fromClause or ():
            self.from_item(item, scope)
        self.quals(stmt.whereClause, scope)
        self.sublinks(stmt.targetList, scope)
        if _citus_table(target):
            self.modification_functions(stmt, target)
            for entry in stmt.targetList or ():
                name = _stable_fed_by_column(entry.val, self.audit.volatility)
                if name:
                    self.fail("update-set", f"{name} fed by a column in UPDATE {target.table} SET {entry.name}")
        self.returning(stmt.returningClause, target)

    def delete(self, stmt: ast.DeleteStmt, parent: _Scope | None) -> None:
        scope = self.new_scope(parent)
        self.with_clause(stmt.withClause, scope)
        target = self.relation(stmt.relation, scope)
        if target is not None:
            self.written.append(target)
        for item in stmt.usingClause or ():
            self.from_item(item, scope)
        self.quals(stmt.whereClause, scope)
        if _citus_table(target):
            self.modification_functions(stmt, target)
        self.returning(stmt.returningClause, target)

    def modification_functions(self, stmt: Any, target: _Occurrence) -> None:
        name = _first_mutable(stmt, self.audit.volatility, worst="v")
        if name:
            self.fail("volatile", f"VOLATILE {name} in a modification of {target.table}")
        name = _stable_fed_by_column(stmt.whereClause, self.audit.volatility)
        if name:
            self.fail("stable-fed-by-column", f"{name} fed by a column in the WHERE of {target.table}")

    def returning(self, returning: Any, target: _Occurrence | None) -> None:
        if not _citus_table(target) or returning is None:
            return
        name = _first_mutable(returning.exprs, self.audit.volatility)
        if name:
            self.fail("returning", f"{name} in the RETURNING of {target.table}")

    # --- judging --------------------------------------------------------------------

    def judge(self) -> None:
        placed = [o for o in self.occurrences if o.placement is not None and o.placement.kind != "local"]
        distributed = [o for o in placed if o.placement is not None and o.placement.kind == "distributed"]
        local = [o for o in self.occurrences if o.placement is not None and o.placement.kind == "local"]
        unknown = sorted({o.table for o in self.occurrences if o.placement is None and o.table not in self.catalog})
        if unknown:
            self.fail("unplaced", f"tables without a placement: {unknown}")
        if (self.catalog or local) and placed:
            names = sorted({*self.catalog, *(o.table for o in local)})
            self.fail("catalog-join", f"{names} read in one statement with {sorted({o.table for o in placed})}")
        groups = {o.placement.group for o in self.written if o.placement is not None and o.placement.group}
        if self.cte_writes and len(groups) > 1:
            self.fail("cte-write", f"a writing CTE across co-location groups {sorted(groups)}")
        if self.path == "rare" or not distributed:
            return
        if len({o.placement.group for o in distributed if o.placement is not None}) > 1:
            self.fail("groups", f"tables of several co-location groups: {sorted({o.table for o in distributed})}")
        self.route()
        unrouted = sorted({o.table for o in distributed if not o.routed})
        if unrouted:
            column = {o.table: o.placement.column for o in distributed if o.placement is not None}
            named = ", ".join(f"{t} by {column[t]}" for t in unrouted)
            self.fail("not-routed", f"on the {self.path} path, not named by equality: {named}")

    def route(self) -> None:
        changed = True
        while changed:
            changed = False
            for source, occurrence in self.links:
                if occurrence.routed:
                    continue
                if source == "const" or source.routed:
                    occurrence.routed = True
                    changed = True
                elif occurrence.routed:
                    source.routed = True
                    changed = True
            for source, occurrence in self.links:
                if source != "const" and occurrence.routed and not source.routed:
                    source.routed = True
                    changed = True
