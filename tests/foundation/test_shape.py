"""The feature shape of AGENTS.md, checked, and two habits of the tests.

Read from the source with `ast`, like tests/foundation/test_layers.py:
- every package's `__init__.py` is a docstring saying what the package is, and nothing else
  (`client/` re-exports its types: the one exception AGENTS.md names);
- a module that builds an `APIRouter` is `router.py` or `<resource>_router.py` and builds one;
  `deps.py` means FastAPI dependencies, `schemas.py` pydantic models, and `service.py` /
  `queries.py` hold no FastAPI type;
- no package of `src/` imports another package's private module (`_name.py`) or its
  `queries.py` (it calls that feature's service instead);
- the tests wait on what they can observe through `tests/fixtures/wait.py`, not in a loop
  of their own that sleeps nor with a sleep of a guessed time, and assert no duration (speed
  goals live in bench/). A sleep that is itself the behaviour (a fake model's pace, a slow
  client, a random offset of a race) says so on its line: `# not polling: <why>`.

`test_the_checks_catch_what_they_are_for` feeds each check a small breaking source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import chatbot

SRC = Path(chatbot.__file__).parent
TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

MIN_DOCSTRING_WORDS = 6
RE_EXPORTING = frozenset({"client"})  # AGENTS.md: the typed client's package is its import path
CLOCKS = frozenset({"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns"})
WAIT_HELPERS = TESTS / "fixtures" / "wait.py"
NOT_POLLING = "# not polling:"
"""A loop or a sleep that paces on purpose (a load generator, a sampler, a fake model) says why on its line."""
ROUNDING = frozenset({"int", "float", "round", "max", "min", "abs"})

# Loops of the tests that sleep and check, and assertions on a duration, still to be moved
# onto `wait_until` and onto what can be observed: per file, how many. The lists may only
# shrink (they are empty: keep them so): a new one fails, and so does an entry that has
# become smaller than the list says. A sleep has no such list: every one is gone or says
# on its line why it is the behaviour.
KNOWN_POLLING: dict[str, int] = {}
KNOWN_TIMED: dict[str, int] = {}


def _modules(root: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _package_of(path: Path) -> str | None:
    """Return the top-level package of a module under src/chatbot (None for a top-level module)."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else None


def _imported(tree: ast.Module) -> Iterator[str]:
    """Yield every module name an import of `tree` names (for `from x import y`, `x.y` too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


# --- the feature shape -------------------------------------------------------------------


def init_problems(path: Path, tree: ast.Module) -> list[str]:
    """Return what is wrong with a package's `__init__.py`."""
    package = path.parent.name
    docstring = ast.get_docstring(tree) or ""
    problems = []
    words = docstring.split()
    if len(words) < MIN_DOCSTRING_WORDS or docstring.strip().rstrip(".") == package:
        problems.append(f"{package}/__init__.py: the docstring must say what `{package}` is")
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    code = [node for node in body if not isinstance(node, ast.ImportFrom) or node.module != "__future__"]
    if code and package not in RE_EXPORTING:
        problems.append(f"{package}/__init__.py: holds code (a docstring only: no code, no re-exports)")
    return problems


def _calls(tree: ast.AST, name: str) -> int:
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == name)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
        )
    )


def module_problems(path: Path, tree: ast.Module) -> list[str]:
    """Return how a module's name and its contents disagree with the shape of AGENTS.md."""
    name = path.name
    where = str(path.relative_to(SRC)) if path.is_relative_to(SRC) else name
    imports = set(_imported(tree))
    problems = []
    routers = _calls(tree, "APIRouter")
    if routers and not (name == "router.py" or name.endswith("_router.py")):
        problems.append(f"{where}: builds an APIRouter; name it router.py or <resource>_router.py")
    if routers > 1:
        problems.append(f"{where}: builds {routers} APIRouters; one resource, one router")
    if name == "deps.py" and "fastapi.Depends" not in imports:
        problems.append(f"{where}: a deps.py holds FastAPI dependencies (Annotated[..., Depends(...)])")
    if name == "schemas.py" and not any(i.startswith(("pydantic", "fastapi.Path")) for i in imports):
        problems.append(f"{where}: a schemas.py holds the feature's request models and path types (pydantic)")
    if name in {"service.py", "queries.py"} and any(i == "fastapi" or i.startswith("fastapi.") for i in imports):
        problems.append(f"{where}: a {name} holds no FastAPI type")
    return problems


def import_problems(path: Path, tree: ast.Module) -> list[str]:
    """Return imports of another package's private module or queries.py."""
    own = _package_of(path)
    where = path.relative_to(SRC)
    problems = []
    for module in sorted({".".join(name.split(".")[:3]) for name in _imported(tree)}):
        parts = module.split(".")
        if len(parts) < 3 or parts[0] != "chatbot" or parts[1] == own:
            continue
        if parts[2].startswith("_"):
            problems.append(f"{where}: imports {module}, private to {parts[1]}/")
        elif parts[2] == "queries":
            problems.append(f"{where}: imports {module}; call {parts[1]}/'s service instead")
    return problems


def test_every_package_init_says_what_it_is_and_holds_no_code() -> None:
    # The root package's own `__init__.py` carries the version: it is no feature.
    inits = [(path, tree) for path, tree in _modules(SRC) if path.name == "__init__.py" and path.parent != SRC]
    problems = [p for path, tree in inits for p in init_problems(path, tree)]
    assert not problems, "\n".join(problems)


def test_module_names_say_what_the_modules_hold() -> None:
    # The shape is a feature folder's: a top-level module (health.py's probes) is foundation.
    problems = [p for path, tree in _modules(SRC) if path.parent != SRC for p in module_problems(path, tree)]
    assert not problems, "\n".join(problems)


def test_no_package_imports_another_packages_private_module_or_queries() -> None:
    problems = [p for path, tree in _modules(SRC) for p in import_problems(path, tree)]
    assert not problems, "\n".join(problems)


# --- the tests' habits -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Habit:
    """A place in a test: a loop that sleeps and checks, or an assertion on a duration."""

    kind: str
    line: int


def _sleeps(nodes: list[ast.stmt]) -> bool:
    """Tell whether statements sleep (outside functions defined in them)."""
    for statement in nodes:
        for node in _walk_same_function(statement):
            if isinstance(node, ast.Call) and _called_name(node) == "sleep":
                return True
    return False


def _walk_same_function(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk_same_function(child)


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _clocked(node: ast.AST, clocked: set[str]) -> bool:
    """Tell whether an expression is a clock reading, or arithmetic on one (a duration, a deadline)."""
    if isinstance(node, ast.Call):
        name = _called_name(node)
        if name in CLOCKS:
            return True
        return name in ROUNDING and any(_clocked(arg, clocked) for arg in node.args)
    if isinstance(node, ast.Name):
        return node.id in clocked
    if isinstance(node, ast.BinOp):
        return _clocked(node.left, clocked) or _clocked(node.right, clocked)
    if isinstance(node, ast.UnaryOp):
        return _clocked(node.operand, clocked)
    if isinstance(node, ast.Await):
        return _clocked(node.value, clocked)
    return False


def _compares_a_clock(test: ast.AST, clocked: set[str]) -> bool:
    """Tell whether an assertion compares a clock reading or a duration made from one."""
    return any(
        isinstance(node, ast.Compare) and any(_clocked(side, clocked) for side in (node.left, *node.comparators))
        for node in ast.walk(test)
    )


def _marked(node: ast.expr | ast.stmt, lines: list[str]) -> bool:
    first, last = node.lineno, getattr(node, "end_lineno", None) or node.lineno
    return any(NOT_POLLING in lines[n - 1] for n in range(first, last + 1))


def habits(source: str) -> list[Habit]:
    """Return the polling loops, fixed sleeps and timed assertions of a test module's source."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: list[Habit] = []
    for node in ast.walk(tree):
        # Any sleep, at any level: a wait for something to happen waits on it (wait.py).
        if isinstance(node, ast.Call) and _called_name(node) == "sleep" and not _marked(node, lines):
            found.append(Habit("fixed sleep", node.lineno))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for function in functions:
        # Names holding a clock reading, or arithmetic on one (`elapsed = time.monotonic() - t0`,
        # `deadline = time.monotonic() + 5`), in the order they are assigned.
        clocked: set[str] = set()
        for node in _walk_same_function(function):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None:
                if _clocked(node.value, clocked):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    clocked.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in _walk_same_function(function):
            if isinstance(node, ast.While | ast.For | ast.AsyncFor) and _sleeps(node.body):
                if NOT_POLLING not in lines[node.lineno - 1]:
                    found.append(Habit("polling loop", node.lineno))
            elif isinstance(node, ast.Assert) and _compares_a_clock(node.test, clocked):
                found.append(Habit("timed assertion", node.lineno))
    return sorted(set(found), key=lambda h: (h.line, h.kind))


def _test_habits() -> dict[str, list[Habit]]:
    out = {}
    for path in sorted(TESTS.rglob("*.py")):
        if path == WAIT_HELPERS or path == Path(__file__).resolve():
            continue
        found = habits(path.read_text(encoding="utf-8"))
        if found:
            out[str(path.relative_to(ROOT))] = found
    return out


def test_tests_wait_on_what_they_observe_and_time_nothing() -> None:
    found = _test_habits()
    problems = []
    advice = {
        "polling loop": "",
        "fixed sleep": f" (a sleep that is the behaviour says `{NOT_POLLING} <why>` on its line)",
        "timed assertion": " (a speed goal is a bench/ script)",
    }
    for kind, known in (("polling loop", KNOWN_POLLING), ("fixed sleep", {}), ("timed assertion", KNOWN_TIMED)):
        counts = {path: sum(h.kind == kind for h in hs) for path, hs in found.items()}
        for path, count in sorted(counts.items()):
            lines = [h.line for h in found[path] if h.kind == kind]
            if count > known.get(path, 0):
                problems.append(
                    f"{path}:{lines}: {kind}; wait with tests/fixtures/wait.py on what can be observed" + advice[kind]
                )
        for path, count in sorted(known.items()):
            if counts.get(path, 0) < count:
                problems.append(
                    f"{path}: fewer {kind}s than the known list says: shrink the list to {counts.get(path, 0)}"
                )
    assert not problems, "\n".join(problems)


# --- the checks catch what they are for ---------------------------------------------------

_POLLING = """
async def test_x(client):
    while (await client.get("/x")).status_code != 200:
        await asyncio.sleep(0.1)
"""
_TIMED = """
def test_y():
    started = time.monotonic()
    do()
    elapsed = time.monotonic() - started
    assert elapsed < 1.0
"""
_PACED = """
async def load(client):
    for _ in range(10):  # not polling: one request per 100 ms is the load
        await client.get("/x")
        await asyncio.sleep(0.1)  # not polling: the load's pace
"""
_SLEEP = """
async def test_z(client):
    await client.post("/x")
    await asyncio.sleep(0.5)
    assert (await client.get("/x")).status_code == 200
"""
_DEADLINE = """
def test_w():
    deadline = time.monotonic() + 5
    do()
    assert time.monotonic() < deadline
"""
_CLOCK_NOT_TIMED = """
def test_v(client):
    now = int(time.time())
    token = {"iat": now, "exp": now + 60}
    assert client.get("/x", token=token).status_code == 200
"""


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert habits(_POLLING) == [Habit("polling loop", 3), Habit("fixed sleep", 4)]
    assert habits(_TIMED) == [Habit("timed assertion", 6)]
    assert habits(_PACED) == []
    assert habits(_SLEEP) == [Habit("fixed sleep", 4)]
    assert habits(_SLEEP.replace("(0.5)", "(0.5)  # not polling: the pause is the race")) == []
    assert habits(_PACED.replace("  # not polling: the load's pace", "")) == [Habit("fixed sleep", 5)]
    assert habits(_DEADLINE) == [Habit("timed assertion", 5)]
    assert habits(_CLOCK_NOT_TIMED) == []

    package = tmp_path / "feature"
    package.mkdir()
    bare = package / "__init__.py"
    for source in ('"""feature."""\n', '"""A feature that does things for callers."""\nX = 1\n'):
        bare.write_text(source)
        assert init_problems(bare, ast.parse(source))
    fine = '"""A feature that does things for callers, said in a sentence."""\n'
    assert not init_problems(bare, ast.parse(fine))

    handlers = package / "handlers.py"
    assert module_problems(handlers, ast.parse("from fastapi import APIRouter\nr = APIRouter()\n"))
    assert module_problems(package / "router.py", ast.parse("a = APIRouter()\nb = APIRouter()\n"))
    assert module_problems(package / "deps.py", ast.parse("from typing import Annotated\n"))
    assert module_problems(package / "service.py", ast.parse("from fastapi import Request\n"))
    assert not module_problems(package / "router.py", ast.parse("from fastapi import APIRouter\nr = APIRouter()\n"))

    ops = SRC / "ops" / "erasure.py"
    assert import_problems(ops, ast.parse("from chatbot.threads.queries import delete_feedback_of_user\n"))
    assert import_problems(ops, ast.parse("from chatbot.threads import queries\n"))
    assert import_problems(ops, ast.parse("from chatbot.threads._ownership import check_owner\n"))
    assert not import_problems(ops, ast.parse("from chatbot.ops import queries\n"))
    assert not import_problems(ops, ast.parse("from chatbot.threads.deletion import delete_thread_rows\n"))
