"""The feature shape of AGENTS.md, checked (the tests' own habits are tests/foundation/test_test_habits.py).

Read from the source with `ast`, like tests/foundation/test_layers.py:
- every package's `__init__.py` is a docstring saying what the package is, and nothing else
  (`client/` re-exports its types: the one exception AGENTS.md names);
- a module that builds an `APIRouter` is `router.py` or `<resource>_router.py` and builds one;
  `deps.py` means FastAPI dependencies, `schemas.py` pydantic models, and `service.py` /
  `queries.py` hold no FastAPI type;
- no package of `src/` imports another package's private module (`_name.py`) or its
  `queries.py` (it calls that feature's service instead);
- no module of `src/` runs over `MAX_LINES` lines: a file a reader cannot take in at one
  sitting is split by what its parts do.

`test_the_checks_catch_what_they_are_for` feeds each check a small breaking source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import chatbot

SRC = Path(chatbot.__file__).parent
TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

MIN_DOCSTRING_WORDS = 6
RE_EXPORTING = frozenset({"client"})  # AGENTS.md: the typed client's package is its import path
MAX_LINES = 500
# Modules still over MAX_LINES, to be split: the set may only shrink (a listed module that
# fits fails until it leaves the list, a new long one fails at once).
KNOWN_LONG = frozenset({"db/langgraph_tables.py", "db/locks.py", "threads/runs.py"})


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


def test_no_module_of_src_runs_over_the_line_limit() -> None:
    long = {
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES
    }
    assert long - KNOWN_LONG == set(), f"split these modules (over {MAX_LINES} lines): {sorted(long - KNOWN_LONG)}"
    assert KNOWN_LONG - long == set(), f"these fit now: take them off KNOWN_LONG: {sorted(KNOWN_LONG - long)}"


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
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
