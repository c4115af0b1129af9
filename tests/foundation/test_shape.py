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
  sitting is split by what its parts do;
- a stored fact's JSON is parsed in one module (memory/facts.py), and memory's store layout
  and its walk over stored values are spelled in memory/ alone.
- a chunk's text with its citation is one class (`responses.QuotedChunk`): search, the graph,
  the run record and the evaluation build from it, none declares a chunk's fields again.
- the key of our metadata on a persisted message is spelled once, in chatbot/turns.py: every
  other module imports it (or `message_meta`) from there.
- the system message is composed in agent/system_message.py alone: no other module joins a
  section (recalled turns included) onto its text, so a run and its replay show one text.
- an id is typed (`ids.py`): no parameter named for a tenant, user, thread or run is a bare
  `str` outside the typed client, whose public signatures take what callers hold.
- a connection's (and a cursor's) type alias is declared once, in db/connection_options.py,
  and imported everywhere else.
- no `cast` lays a TypedDict over a value: a row or stored JSON read as one is validated
  where it is read (a pydantic `TypeAdapter` built once) or built by its type.

`test_the_checks_catch_what_they_are_for` feeds each check a small breaking source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import chatbot
from chatbot.ids import TenantId, UserId
from chatbot.memory.namespaces import facts_namespace, history_namespace, profile_namespace
from chatbot.turns import META_KEY

SRC = Path(chatbot.__file__).parent
TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

MIN_DOCSTRING_WORDS = 6
RE_EXPORTING = frozenset({"client"})  # AGENTS.md: the typed client's package is its import path
MAX_LINES = 500


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
    assert not long, f"split these modules by what their parts do (over {MAX_LINES} lines): {sorted(long)}"


# --- one connection alias, and no TypedDict laid over a value unchecked -------------------

ALIAS_MODULE = "db/connection_options.py"
ALIASES = frozenset({f"{ALIAS_MODULE}:Conn", f"{ALIAS_MODULE}:Cursor"})
# psycopg's connection and cursor classes: a module-level name bound to one of them (or to
# one with its row type) is an alias of the connection every statement function takes.
PSYCOPG_TYPES = frozenset({"AsyncConnection", "AsyncCursor", "Connection", "Cursor"})


def _type_name(node: ast.expr) -> str | None:
    """Return the class a type names: `AsyncConnection` for `AsyncConnection[Any]` and `psycopg.AsyncConnection`."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def connection_aliases(where: str, tree: ast.Module) -> list[str]:
    """Return `module:Name` for each module-level alias of a psycopg connection or cursor type in `tree`."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and _type_name(value) in PSYCOPG_TYPES:
            found.append(f"{where}:{target.id}")
    return found


# Casts to a TypedDict over values never read from storage, each with why (`module:TypedDict`).
CASTS_IN_PROCESS = {
    "agent/run.py:ConversationState": "the graph's stream of state updates: what the nodes returned, in process",
}


def typed_dict_names(trees: list[ast.Module]) -> set[str]:
    """Return the names of every TypedDict class the trees declare, subclasses of one included."""
    classes = [
        (node.name, {_type_name(base) for base in node.bases})
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    ]
    names = {"TypedDict"}
    while grown := {name for name, bases in classes if bases & names} - names:
        names |= grown
    return names - {"TypedDict"}


def _cast_targets(tree: ast.AST) -> Iterator[tuple[int, set[str]]]:
    """Yield (line, the names its type spells) for every `cast(...)` of `tree`, quoted types parsed."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and _type_name(node.func) == "cast":
            target = node.args[0]
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                target = ast.parse(target.value, mode="eval").body
            yield node.lineno, {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def typed_dict_casts(where: str, tree: ast.AST, typed_dicts: set[str]) -> list[str]:
    """Return where `tree` casts to a type naming one of `typed_dicts`, those of CASTS_IN_PROCESS aside."""
    problems = []
    for line, names in _cast_targets(tree):
        named = {name for name in names & typed_dicts if f"{where}:{name}" not in CASTS_IN_PROCESS}
        if named:
            problems.append(
                f"{where}:{line}: casts to {sorted(named)}: validate the value where it is read "
                "(a TypeAdapter built once) instead of laying the TypedDict over it unchecked"
            )
    return problems


def test_the_connection_alias_is_declared_once() -> None:
    found = {a for path, tree in _modules(SRC) for a in connection_aliases(path.relative_to(SRC).as_posix(), tree)}
    assert found == ALIASES, f"import Conn and Cursor from {ALIAS_MODULE} instead of declaring them again"


def test_no_typed_dict_is_laid_over_a_value_with_cast() -> None:
    modules = [(path.relative_to(SRC).as_posix(), tree) for path, tree in _modules(SRC)]
    typed_dicts = typed_dict_names([tree for _, tree in modules])
    assert {"Held", "ClaimedJob", "MessageMeta", "VersionRow"} <= typed_dicts  # the check sees them
    problems = [p for where, tree in modules for p in typed_dict_casts(where, tree, typed_dicts)]
    assert not problems, "\n".join(problems)
    # An allowed cast that is gone leaves the list too.
    allowed = {f"{where}:{name}" for where, tree in modules for _, names in _cast_targets(tree) for name in names}
    assert CASTS_IN_PROCESS.keys() <= allowed, "take a cast that is gone off CASTS_IN_PROCESS"


# --- one home for a stored fact, and for memory's store layout ----------------------------

FACT_MODULE = "memory/facts.py"
# Keys a stored fact alone has (when it was believed, what closed it): another module reading
# or writing one is a second parser of the fact's JSON.
FACT_KEYS = frozenset({"valid_from", "valid_until", "closed_by"})
_ANY = TenantId("t"), UserId("u")
# The labels memory's namespaces add under a user (the ids and the generic "user" aside).
MEMORY_LABELS = frozenset(
    label
    for namespace in (facts_namespace(*_ANY), history_namespace(*_ANY), profile_namespace(*_ANY))
    for label in namespace
) - {*_ANY, "user"}


def _key_reads(tree: ast.AST) -> Iterator[tuple[int, ast.expr, object, bool]]:
    """Yield (line, what is read, key, by `.get`) for every `x[key]` and `x.get(key, ...)` of `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            yield node.lineno, node.value, key, False
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            first = node.args[0] if node.args else None
            yield node.lineno, node.func.value, first.value if isinstance(first, ast.Constant) else None, True


def fact_parsing_problems(where: str, tree: ast.AST) -> list[str]:
    """Return where a module other than memory/facts.py takes a stored value apart, or spells a fact's key."""
    if where == FACT_MODULE:
        return []
    problems = []
    for line, read, key, _ in _key_reads(tree):
        if isinstance(read, ast.Attribute) and read.attr == "value":
            problems.append(f"{where}:{line}: reads a stored item's value by key; parse it with {FACT_MODULE}")
        elif key in FACT_KEYS:
            problems.append(f"{where}:{line}: reads a fact's `{key}`; parse the fact with {FACT_MODULE}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            spelled = {str(k.value) for k in node.keys if isinstance(k, ast.Constant)} & FACT_KEYS
            if spelled:
                problems.append(f"{where}:{node.lineno}: writes a fact's {sorted(spelled)}; use {FACT_MODULE}")
    return problems


def memory_layout_problems(where: str, tree: ast.AST) -> list[str]:
    """Return where a module outside memory/ spells a namespace of memory's, or looks for a thread in a stored value."""
    if where.startswith("memory/"):
        return []
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple):
            labels = {str(e.value) for e in node.elts if isinstance(e, ast.Constant)} & MEMORY_LABELS
            if labels:
                problems.append(
                    f"{where}:{node.lineno}: spells memory's namespaces {sorted(labels)} (memory/namespaces.py)"
                )
    for line, _, key, tolerant in _key_reads(tree):
        # A lookup that tolerates the key's absence is a walk over values of any shape; a row's
        # `r["thread_id"]` is a column.
        if key == "thread_id" and tolerant and where.startswith("db/"):
            problems.append(
                f"{where}:{line}: looks for a thread inside a value; memory/thread_deletion.py walks its own"
            )
    return problems


def test_a_stored_fact_is_parsed_in_one_module() -> None:
    problems = [
        p for path, tree in _modules(SRC) for p in fact_parsing_problems(path.relative_to(SRC).as_posix(), tree)
    ]
    assert not problems, "\n".join(problems)


def test_memorys_store_layout_and_the_walk_over_its_values_live_in_memory() -> None:
    # db/langgraph_store.py runs the store's statements on the prefixes memory gives it; the
    # "drop this thread from every fact" walk is memory's (a deleted thread's facts stay, with
    # no source naming it: tests/threads/test_delete_fact_sources.py).
    problems = [
        p for path, tree in _modules(SRC) for p in memory_layout_problems(path.relative_to(SRC).as_posix(), tree)
    ]
    assert not problems, "\n".join(problems)


def test_the_fact_and_layout_checks_catch_a_second_reader() -> None:
    # What this tree held before: facts read by key in read.py, and db/ walking memory's areas.
    assert fact_parsing_problems("memory/read.py", ast.parse('text = str(item.value.get("text", ""))\n'))
    assert fact_parsing_problems("memory/writer.py", ast.parse('v = {"valid_from": now}\n'))
    assert fact_parsing_problems("memory/read.py", ast.parse('since = value["valid_from"]\n'))
    assert not fact_parsing_problems(FACT_MODULE, ast.parse('since = stored["valid_from"]\n'))
    assert not fact_parsing_problems("memory/read.py", ast.parse("fact = Fact.from_stored(item.value)\n"))
    old_walk = '_USER_AREAS = ("facts", "facts_history", "profile")\nif item.get("thread_id") == thread_id: pass\n'
    assert len(memory_layout_problems("db/langgraph_tables.py", ast.parse(old_walk))) == 2
    assert not memory_layout_problems("memory/namespaces.py", ast.parse('ns = (t, "user", u, "facts")\n'))


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

    # What this tree held before: the key declared in three modules and read bare in a fourth.
    assert meta_key_spellings("agent/_summary.py", ast.parse('meta = message.additional_kwargs.get("chatbot")\n'))
    assert meta_key_spellings("agent/_window.py", ast.parse('METADATA_KEY = "chatbot"\n'))
    assert meta_key_spellings("recall/service.py", ast.parse('META_KEY: str = "chatbot"\n'))
    assert meta_key_spellings("threads/x.py", ast.parse('m = HumanMessage("", additional_kwargs={"chatbot": {}})\n'))
    assert meta_key_spellings("threads/x.py", ast.parse('run = message.additional_kwargs["chatbot"]["run_id"]\n'))
    assert meta_key_spellings("agent/x.py", ast.parse('if "chatbot" in message.additional_kwargs: pass\n'))
    # The same word as a name, not a key: the tracer, the database, a weak secret, a command.
    assert not meta_key_spellings("tracing/_spans.py", ast.parse('TRACER_NAME = "chatbot"\n'))
    assert not meta_key_spellings("db/embedded.py", ast.parse('SERVICE_DATABASE = "chatbot"\n'))
    assert not meta_key_spellings("config.py", ast.parse('WEAK = frozenset({"dev", "chatbot"})\n'))
    assert not meta_key_spellings("agent/x.py", ast.parse("kwargs = {k: v for k, v in a.items() if k != META_KEY}\n"))
    # What this tree held before: recall appending its section in the graph and in the record.
    appended = "system = SystemMessage(str(rebuilt.messages[0].text) + section)\n"
    assert system_message_problems("agent/_recall.py", ast.parse(appended))
    rebuilt = "text = compose_system_text(prompt, cuts=cuts) + recalled_section(recalled, language)\n"
    assert system_message_problems("threads/record.py", ast.parse(rebuilt))
    named = 'section = recalled_section(turns, "en")\ntext = f"{system}{section}"\n'
    assert system_message_problems("agent/nodes.py", ast.parse(named))
    joined = "text = SECTION_BREAK.join([format_system_prompt(p, **parts), block])\n"
    assert system_message_problems("evaluation/cases.py", ast.parse(joined))
    grown = "text = compose_system_text(parts, cuts)\ntext += tail\n"
    assert system_message_problems("threads/record.py", ast.parse(grown))
    assert not system_message_problems("threads/record.py", ast.parse("text = compose_system_text(parts, cuts)\n"))
    assert not system_message_problems(SYSTEM_MESSAGE_MODULE, ast.parse(rebuilt))
    # What this tree held before: ids as bare strings, one at a time, optional, quoted, in a list.
    untyped = (
        "def a(pool, thread_id: str) -> None: ...\n"
        "async def b(conn, *, tenant: str, user: str | None = None) -> None: ...\n"
        "def c(run_id: 'str', user_id: Optional[str]) -> None: ...\n"
        "def d(conn, thread_ids: Sequence[str]) -> None: ...\n"
    )
    found = untyped_ids("threads/deletion.py", ast.parse(untyped))
    assert [line.split(" ", 1)[1] for line in found] == [
        "a(thread_id)",
        "b(tenant)",
        "b(user)",
        "c(run_id)",
        "c(user_id)",
        "d(thread_ids)",
    ]
    typed = (
        "def a(pool, thread_id: ThreadId, user: UserId | None = None) -> None: ...\n"
        "def d(conn, thread_ids: Sequence[ThreadId], thread: Sequence[str], run: str) -> None: ...\n"
        "def e(tenant: str = typer.Option(..., '--tenant'), thread: str = Argument(...)) -> None: ...\n"
    )
    assert not untyped_ids("threads/deletion.py", ast.parse(typed))
    fields = "class Row(TypedDict):\n    thread_id: str\n    title: str\n    tenant: TenantId\n"
    assert [line.split(" ", 1)[1] for line in untyped_ids("recall/queries.py", ast.parse(fields))] == ["Row.thread_id"]
    # What this tree held before: the alias declared again in seven modules, rows cast to TypedDicts.
    assert connection_aliases("recall/queries.py", ast.parse("Conn = AsyncConnection[Any]\n"))
    assert connection_aliases("db/pool.py", ast.parse("Connection: TypeAlias = psycopg.AsyncConnection[DictRow]\n"))
    assert connection_aliases("db/langgraph_tables.py", ast.parse("Cursor = AsyncCursor[Any]\n"))
    assert not connection_aliases("db/pool.py", ast.parse("Pool = AsyncConnectionPool[AsyncConnection[DictRow]]\n"))
    assert not connection_aliases(
        "memory/items.py", ast.parse("async def f(conn: AsyncConnection[Any]) -> None: ...\n")
    )
    rows = typed_dict_names([ast.parse("class Held(TypedDict):\n    n: int\nclass Row(Held):\n    m: int\n")])
    assert rows == {"Held", "Row"}
    assert typed_dict_casts("budgets/queries.py", ast.parse("return cast(Held, dict(row))\n"), rows)
    assert typed_dict_casts("memory/queries.py", ast.parse('return cast("Row | None", row)\n'), rows)
    assert typed_dict_casts("memory/queries.py", ast.parse("return typing.cast(list[Row], rows)\n"), rows)
    assert not typed_dict_casts("memory/ttl.py", ast.parse("start(cast(int, minutes))\n"), rows)


# --- one shape for a chunk's text with its citation ----------------------------------------

CHUNK_SHAPE = "responses.py:QuotedChunk"
# Classes that may declare a chunk id beside its text, each with why it is not a second shape
# of a chunk as found, quoted and cited (those are all `QuotedChunk`).
CHUNK_FIELDS_ELSEWHERE = {
    "responses.py:RetrievedChunk": "the API's wire form, built from a QuotedChunk; its text is null once pruned",
    "retrieval/chunking.py:Chunk": "a piece of a document being cut for ingest, before it is stored or versioned",
    "retrieval/queries.py:ChunkInsert": "the insert statement's parameters: a version with its index forms",
}


def chunk_shapes(where: str, tree: ast.AST) -> list[str]:
    """Return `module:Class` for each class of `tree` that declares both `chunk_id` and `text`."""
    return [
        f"{where}:{node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and {"chunk_id", "text"}
        <= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    ]


def test_one_class_is_a_chunks_text_with_its_citation() -> None:
    found = {shape for path, tree in _modules(SRC) for shape in chunk_shapes(path.relative_to(SRC).as_posix(), tree)}
    assert CHUNK_SHAPE in found
    others = found - {CHUNK_SHAPE} - CHUNK_FIELDS_ELSEWHERE.keys()
    assert not others, f"build these from {CHUNK_SHAPE} instead of declaring a chunk's fields again: {sorted(others)}"
    assert CHUNK_FIELDS_ELSEWHERE.keys() <= found, "take a class that is gone off CHUNK_FIELDS_ELSEWHERE"


def test_the_chunk_check_catches_a_second_shape() -> None:
    # What this tree held before: the search's subclass narrowing the API's model, and a TypedDict.
    narrowed = "class FoundChunk(RetrievedChunk):\n    chunk_id: str\n    text: str\n    score: float = 0.0\n"
    assert chunk_shapes("retrieval/search.py", ast.parse(narrowed)) == ["retrieval/search.py:FoundChunk"]
    typed = "class QuotedChunk(TypedDict):\n    chunk_id: str\n    title: str\n    text: str\n"
    assert chunk_shapes("models/chunks.py", ast.parse(typed))
    assert not chunk_shapes("agent/result.py", ast.parse("class Result:\n    chunks: list[QuotedChunk]\n"))


# --- one home for a conversation turn's metadata --------------------------------------------

TURN_MODULE = "turns.py"
_KEY_METHODS = frozenset({"get", "pop", "setdefault"})


def _is_key(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == META_KEY


def meta_key_spellings(where: str, tree: ast.AST) -> list[str]:
    """Return `module:line` for each place `tree` spells the metadata key as a key.

    A key is what the literal is used as: a subscript, a dict key, the first argument of
    `.get`/`.pop`/`.setdefault`, the left side of `in`, or the value of a `..._KEY` constant.
    The same word as a name (the tracer's, the database's) is not the key and does not count.
    """
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_key(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(_is_key(k) for k in node.keys):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _KEY_METHODS:
            if node.args and _is_key(node.args[0]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and _is_key(node.left) and isinstance(node.ops[0], ast.In | ast.NotIn):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _is_key(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.endswith("KEY") for t in targets):
                lines.append(node.lineno)
    return [f"{where}:{line}" for line in lines]


def test_the_message_metadata_key_is_spelled_once() -> None:
    spelled = [
        place for path, tree in _modules(SRC) for place in meta_key_spellings(path.relative_to(SRC).as_posix(), tree)
    ]
    home = [place for place in spelled if place.startswith(f"{TURN_MODULE}:")]
    assert len(home) == 1, f"{TURN_MODULE} declares the key once (META_KEY): {home}"
    others = [place for place in spelled if place not in home]
    assert not others, f"import META_KEY or message_meta from chatbot/{TURN_MODULE} instead: {others}"


# --- one composer of the system message ----------------------------------------------------

SYSTEM_MESSAGE_MODULE = "agent/system_message.py"
# What returns the system message's text or one of its sections: text another module joins
# to them is a second composer, which a run record's replay would not know of.
SECTION_FUNCTIONS = frozenset({"compose_system_text", "format_system_prompt", "recalled_section", "recalled_part"})


def _callee(node: ast.AST | None) -> str:
    """Return the name a call calls ("" for anything else)."""
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _joined(node: ast.AST) -> list[ast.expr] | None:
    """Return the pieces `node` puts together into one string (`a + b`, `a += b`, an f-string, `sep.join([...])`)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [node.left, node.right]
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        return [node.target, node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
    if isinstance(node, ast.Call) and _callee(node) == "join" and node.args:
        pieces = node.args[0]
        return list(pieces.elts) if isinstance(pieces, ast.List | ast.Tuple) else [pieces]
    return None


def system_message_problems(where: str, tree: ast.AST) -> list[str]:
    """Return where a module other than agent/system_message.py joins a section onto the system message's text.

    A section is what a section function returns, or a name the module bound to one; a
    `SystemMessage` built from text put together there is composed by hand.
    """
    if where == SYSTEM_MESSAGE_MODULE:
        return []
    sections = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign) and _callee(node.value) in SECTION_FUNCTIONS
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }

    def is_section(piece: ast.AST) -> bool:
        return _callee(piece) in SECTION_FUNCTIONS or (isinstance(piece, ast.Name) and piece.id in sections)

    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr | ast.stmt):
            continue
        pieces = _joined(node)
        if pieces is not None and any(is_section(p) for p in pieces):
            problems.append(
                f"{where}:{node.lineno}: joins a system-message section; compose it in {SYSTEM_MESSAGE_MODULE}"
            )
        elif _callee(node) == "SystemMessage":
            assert isinstance(node, ast.Call)
            content = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "content")]
            if any(_joined(c) is not None for c in content):
                problems.append(f"{where}:{node.lineno}: puts a system message's text together; compose it there")
    return problems


def test_the_system_message_is_composed_in_one_module() -> None:
    problems = [
        p for path, tree in _modules(SRC) for p in system_message_problems(path.relative_to(SRC).as_posix(), tree)
    ]
    assert not problems, "\n".join(problems)


# --- ids are typed everywhere but at the boundary ----------------------------------------

# Parameter names that carry one id of ids.py. `run` is not one (the token counter's run of
# characters), and `thread` is an id only as a bare `str` (models/ rank a thread of texts).
ID_PARAMETERS = frozenset({"tenant", "tenant_id", "user", "user_id", "thread", "thread_id", "run_id"})
ID_COLLECTIONS = frozenset({"tenant_ids", "user_ids", "thread_ids", "run_ids"})
UNTYPED_IDS_ALLOWED = "client/"  # the typed client's public signatures take the caller's plain strings
# A command-line option or argument is where an id enters, as a `str`: typer parses a NewType
# too, but `--help` would show it as `<chatbot.ids.TenantId>`. The command converts it once.
BOUNDARY_DEFAULTS = frozenset({"Option", "Argument"})


def _is_str(node: ast.expr | None) -> bool:
    """Whether an annotation is `str`, `str | None` or `Optional[str]` (as written, quoted or not)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _is_str(ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.Name):
        return node.id == "str"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = (node.left, node.right)
        return any(_is_str(side) for side in sides) and all(
            _is_str(side) or (isinstance(side, ast.Constant) and side.value is None) for side in sides
        )
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        return _is_str(node.slice)
    return False


def _is_boundary(default: ast.expr | None) -> bool:
    return (
        isinstance(default, ast.Call)
        and isinstance(default.func, ast.Attribute | ast.Name)
        and (default.func.attr if isinstance(default.func, ast.Attribute) else default.func.id) in BOUNDARY_DEFAULTS
    )


def untyped_ids(where: str, tree: ast.AST) -> list[str]:
    """Return `module:line function(parameter)` for each id parameter of `tree` annotated as a bare `str`.

    A collection of ids (`thread_ids: Sequence[str]`) counts too; a command-line option does not.
    So does a class's field (`Class.field`) named for an id and annotated as a bare `str`.
    """
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        positional = args.posonlyargs + args.args
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        for arg, default in [
            *zip(positional, defaults, strict=True),
            *zip(args.kwonlyargs, args.kw_defaults, strict=True),
        ]:
            ann = arg.annotation
            bare = (arg.arg in ID_PARAMETERS and _is_str(ann)) or (
                arg.arg in ID_COLLECTIONS and isinstance(ann, ast.Subscript) and _is_str(ann.slice)
            )
            if bare and not _is_boundary(default):
                found.append(f"{where}:{node.lineno} {node.name}({arg.arg})")
    for node in ast.walk(tree):
        # A field of a dataclass, TypedDict or model carries the id on as far as its type says.
        if isinstance(node, ast.ClassDef):
            for field in node.body:
                if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
                    if field.target.id in ID_PARAMETERS and _is_str(field.annotation):
                        found.append(f"{where}:{field.lineno} {node.name}.{field.target.id}")
    return found


def test_ids_are_typed_outside_the_typed_client() -> None:
    found: dict[str, list[str]] = {}
    for path, tree in _modules(SRC):
        where = path.relative_to(SRC).as_posix()
        if not where.startswith(UNTYPED_IDS_ALLOWED):
            found.setdefault(where, []).extend(untyped_ids(where, tree))
    untyped = [line for lines in found.values() for line in lines]
    assert not untyped, "type these with chatbot/ids.py (TenantId, UserId, ThreadId, RunId):\n" + "\n".join(untyped)
