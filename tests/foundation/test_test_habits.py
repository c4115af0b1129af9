"""Two habits of the tests, checked: they wait on what they observe and time nothing.

Read from the source with `ast`, like tests/foundation/test_shape.py: the tests wait on what
they can observe through `tests/fixtures/wait.py`, not in a loop of their own that sleeps nor
with a sleep of a guessed time, and assert no duration (speed goals live in bench/). A sleep
that is itself the behaviour (a fake model's pace, a slow client, a random offset of a race)
says so on its line: `# not polling: <why>`.

`test_the_checks_catch_what_they_are_for` feeds each check a small breaking source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

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


def test_the_checks_catch_what_they_are_for() -> None:
    assert habits(_POLLING) == [Habit("polling loop", 3), Habit("fixed sleep", 4)]
    assert habits(_TIMED) == [Habit("timed assertion", 6)]
    assert habits(_PACED) == []
    assert habits(_SLEEP) == [Habit("fixed sleep", 4)]
    assert habits(_SLEEP.replace("(0.5)", "(0.5)  # not polling: the pause is the race")) == []
    assert habits(_PACED.replace("  # not polling: the load's pace", "")) == [Habit("fixed sleep", 5)]
    assert habits(_DEADLINE) == [Habit("timed assertion", 5)]
    assert habits(_CLOCK_NOT_TIMED) == []
