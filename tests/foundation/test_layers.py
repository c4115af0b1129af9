"""The package graph is one-way: no import cycles between chatbot's packages, no import upwards.

The imports are read from the source with `ast` (every `import`, at any depth, under
`TYPE_CHECKING` too: a type-only import is still a dependency a reader must follow), so
the test sees what the code says, whatever happens to be imported at run time.

Layers, bottom to top (docs/architecture.md draws them):
- foundation: infrastructure (`db/`) and the modules every feature may use (settings,
  the caller, text helpers, errors, logs, metrics, auth, the API's vocabulary);
- features: each in its folder, importing other features only in the directions of
  `FEATURE_IMPORTS`;
- composition: the app, the command line and the operations that span features.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import chatbot

SRC = Path(chatbot.__file__).parent

FOUNDATION = frozenset(
    {
        "db",  # infrastructure: pools, embedded Postgres, migrations, locks, the saver
        "config",
        "caller",
        "ids",  # TenantId, UserId, ThreadId, RunId: a swapped pair of ids is a type error
        "text",
        "timestamps",
        "errors",
        "json_body",  # request bodies parsed as strict UTF-8 JSON
        "failures",  # the one table of a failed run's reasons, statuses and wording
        "logs",
        "metrics",
        "auth",
        "limits",
        "health",
        "deps",  # infrastructure services as FastAPI dependencies; features keep their own
        "responses",  # the contract's response bodies, shared with the typed client
        "openapi",  # what every router documents (problem responses, SSE media type)
        "openapi_examples",
        "tasks",  # stopping a background asyncio task
        "turns",  # a conversation turn: message metadata, the one transcript predicate and reader
    }
)
FEATURES = frozenset(
    {"agent", "models", "memory", "recall", "retrieval", "documents", "threads", "tracing", "client", "budgets"}
)
COMPOSITION = frozenset({"app", "services", "cli", "ops", "evaluation"})
RANK = {**dict.fromkeys(FOUNDATION, 0), **dict.fromkeys(FEATURES, 1), **dict.fromkeys(COMPOSITION, 2)}

# Which features a feature may import. Together they form one order (threads, tracing,
# agent, then memory, budgets, models and retrieval at the bottom): the run path drives the
# graph, the graph uses memory, the model responders and retrieval, and none of those looks
# up. Budgets sit under every model call (the run's answer, the summary, the memory job)
# and price with the models' prices.
FEATURE_IMPORTS: Mapping[str, frozenset[str]] = {
    # A deleted thread's name goes from the user's memory (memory/thread_deletion.py).
    "threads": frozenset({"agent", "budgets", "memory", "recall", "retrieval", "tracing"}),
    "tracing": frozenset({"agent"}),  # reads a provider error's HTTP status (agent/modelcall.py)
    "agent": frozenset({"budgets", "memory", "models", "recall", "retrieval"}),
    # The thread's earlier turns: spelled as retrieval spells knowledge (retrieval/normalize.py).
    "recall": frozenset({"retrieval"}),
    "memory": frozenset({"budgets"}),
    "budgets": frozenset({"models"}),
    "models": frozenset(),
    # Ingest chunks what a document reader returns; no part of retrieval knows a file format.
    "retrieval": frozenset({"documents"}),
    "documents": frozenset(),
    "client": frozenset(),
}

Edge = tuple[str, str]


def module_name(path: Path) -> str:
    """Return the dotted module name of a source file under SRC."""
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Return the chatbot modules (or packages) a source file imports, absolute."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            # `from chatbot import metrics` imports the module chatbot.metrics.
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m == "chatbot" or m.startswith("chatbot.")}


def unit_of(module: str) -> str:
    """Return the top-level package or module of `chatbot.<unit>...` ("chatbot" for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "chatbot"


def module_edges() -> set[Edge]:
    """Return every (importer, imported) pair of modules in different units."""
    edges: set[Edge] = set()
    for path in sorted(SRC.rglob("*.py")):
        importer = module_name(path)
        for target in imported_modules(path):
            if unit_of(target) != unit_of(importer) and unit_of(target) != "chatbot":
                edges.add((importer, _existing_module(target)))
    return edges


def _existing_module(target: str) -> str:
    """Return `target` cut back to a module that exists (drops imported names)."""
    parts = target.split(".")
    while len(parts) > 1:
        base = SRC.parent.joinpath(*parts)
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            return ".".join(parts)
        parts.pop()
    return target


def layer_violations(edges: Iterable[Edge], allowed: Iterable[Edge] = ()) -> list[str]:
    """Return the imports that point up a layer, or between features against FEATURE_IMPORTS."""
    exempt = set(allowed)
    problems = []
    for importer, target in sorted(set(edges) - exempt):
        a, b = unit_of(importer), unit_of(target)
        if RANK[a] < RANK[b]:
            problems.append(f"{importer} -> {target}: {a} sits below {b}")
        elif a in FEATURES and b in FEATURES and b not in FEATURE_IMPORTS[a]:
            problems.append(f"{importer} -> {target}: feature {a} may not import feature {b}")
    return problems


def unit_cycles(edges: Iterable[Edge], allowed: Iterable[Edge] = ()) -> list[list[str]]:
    """Return the groups of units that import each other in a loop (Tarjan's strongly connected components)."""
    graph: dict[str, set[str]] = {}
    for importer, target in set(edges) - set(allowed):
        graph.setdefault(unit_of(importer), set()).add(unit_of(target))
        graph.setdefault(unit_of(target), set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_every_package_and_top_level_module_has_a_layer() -> None:
    units = {unit_of(module_name(p)) for p in SRC.rglob("*.py")} - {"chatbot"}
    assert units - set(RANK) == set(), "place the new package in FOUNDATION, FEATURES or COMPOSITION"
    assert set(RANK) - units == set(), "a layer names a package that no longer exists"


def test_the_walk_sees_the_imports_the_code_makes() -> None:
    edges = module_edges()
    # Known imports, one per kind: plain `from x import y`, `from chatbot import module`,
    # an import inside a function (cli/replay.py imports the record reader where it needs it).
    assert ("chatbot.agent.nodes", "chatbot.memory.namespaces") in edges
    assert ("chatbot.agent.nodes", "chatbot.metrics") in edges
    assert ("chatbot.cli.replay", "chatbot.threads.record") in edges


def test_no_import_points_up_a_layer_or_against_the_feature_order() -> None:
    assert layer_violations(module_edges()) == []


def test_no_cycle_between_packages() -> None:
    assert unit_cycles(module_edges()) == []


def test_the_checks_catch_what_they_are_for() -> None:
    # The checks above pass on today's code; this shows they would not pass on a bad one.
    upward = ("chatbot.memory.writer", "chatbot.agent.collaborators")
    sideways = ("chatbot.models.offline", "chatbot.memory.extraction")
    assert len(layer_violations([upward, sideways])) == 2
    assert layer_violations([("chatbot.agent.nodes", "chatbot.memory.jobs")]) == []
    loop = [("chatbot.agent.nodes", "chatbot.memory.jobs"), upward, ("chatbot.db.pool", "chatbot.config")]
    assert unit_cycles(loop) == [["agent", "memory"]]
    assert unit_cycles(loop, allowed=[upward]) == []
