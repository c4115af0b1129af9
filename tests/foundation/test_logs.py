"""JSON log lines of failures: exception types and frames of the whole chain, never a message."""

from __future__ import annotations

import io
import json
import linecache
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from chatbot.agent.modelcall import ModelFailure, TimeLimits, ask_model
from chatbot.logs import MAX_FRAMES, JsonFormatter
from chatbot.models.chain import ChainEntry
from tests.fixtures.models import ProviderErrorChatModel

# Stands for what an exception message can quote: the user's words, a provider's reply.
SECRET = "my card is 6037-9911-2233-4455, please remember"


@pytest.fixture
def log_lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """Return a logger writing through the service's JSON formatter, and what it wrote."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"test.logs.{id(out)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, out
    logger.handlers[:] = []


def _one_line(out: io.StringIO) -> dict[str, Any]:
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    return dict(json.loads(lines[0]))


class StoreError(Exception):
    """An error raised deep down, with a message quoting data."""


def _read_row() -> None:
    raise StoreError(f"bad row: {SECRET}")


def _load_turn() -> None:
    try:
        _read_row()
    except StoreError:
        raise ValueError(f"could not load: {SECRET}")  # noqa: B904 - an implicit context, on purpose


def _run_turn() -> None:
    try:
        _load_turn()
    except ValueError as exc:
        raise RuntimeError(SECRET) from exc


def _source_line(frame: dict[str, Any]) -> str:
    return linecache.getline(frame["file"], frame["line"]).strip()


def test_a_logged_chain_has_every_type_and_frame_and_no_message(
    log_lines: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = log_lines
    try:
        _run_turn()
    except RuntimeError:
        logger.error("run failed", exc_info=True, extra={"run_id": "r-1"})
    entry = _one_line(out)
    assert SECRET not in out.getvalue() and "6037" not in out.getvalue()
    assert entry["run_id"] == "r-1" and entry["error"] == "RuntimeError"
    chain = entry["exception"]
    assert [(e["type"], e["relation"]) for e in chain] == [
        ("RuntimeError", "raised"),
        ("ValueError", "cause"),
        (f"{__name__}.StoreError", "context"),
    ]
    # Each exception's innermost frame is the line that raised it, in this file.
    innermost = [e["frames"][-1] for e in chain]
    assert [f["function"] for f in innermost] == ["_run_turn", "_load_turn", "_read_row"]
    assert all(f["file"] == __file__ for f in innermost)
    assert [_source_line(f).split("(")[0] for f in innermost] == [
        "raise RuntimeError",
        "raise ValueError",
        "raise StoreError",
    ]


def test_a_suppressed_context_is_not_logged(log_lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = log_lines
    try:
        try:
            _read_row()
        except StoreError:
            raise KeyError("nothing to add") from None
    except KeyError:
        logger.warning("lookup failed", exc_info=True)
    assert [e["type"] for e in _one_line(out)["exception"]] == ["KeyError"]


def test_exception_group_members_are_logged_by_type(log_lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = log_lines
    try:
        errors: list[Exception] = []
        for failing in (_read_row, _run_turn):
            try:
                failing()
            except Exception as exc:
                errors.append(exc)
        raise ExceptionGroup(SECRET, errors)
    except ExceptionGroup:
        logger.error("tasks failed", exc_info=True)
    assert SECRET not in out.getvalue()
    (group,) = _one_line(out)["exception"]
    assert group["type"] == "ExceptionGroup"
    members = [[e["type"] for e in chain] for chain in group["members"]]
    assert members == [[f"{__name__}.StoreError"], ["RuntimeError", "ValueError", f"{__name__}.StoreError"]]


def test_deep_recursion_keeps_the_innermost_frames(log_lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = log_lines

    def descend(depth: int) -> None:
        if depth == 0:
            raise StoreError(SECRET)
        descend(depth - 1)

    try:
        descend(MAX_FRAMES * 2)
    except StoreError:
        logger.error("too deep", exc_info=True)
    (error,) = _one_line(out)["exception"]
    assert len(error["frames"]) == MAX_FRAMES
    assert error["frames_omitted"] > 0
    assert _source_line(error["frames"][-1]) == "raise StoreError(SECRET)"


async def test_a_provider_failure_keeps_its_class_status_and_frames(
    log_lines: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = log_lines
    model = ProviderErrorChatModel(status_code=429, error_message=f"quota exceeded for: {SECRET}")
    with pytest.raises(ModelFailure) as raised:
        await ask_model(
            [ChainEntry("custom:provider", model)],
            [HumanMessage(content=SECRET)],
            known_chunk_ids=set(),
            language="en",
            limits=TimeLimits(first_token=10, idle=10, total=10),
            on_delta=lambda _: None,
        )
    failure = raised.value
    assert (failure.error_class, failure.status) == ("ProviderHTTPError", 429)
    assert SECRET not in str(failure)
    logger.error("run failed", exc_info=(type(failure), failure, failure.__traceback__))
    assert SECRET not in out.getvalue()
    chain = _one_line(out)["exception"]
    assert chain[0]["type"] == "chatbot.agent.modelcall.ModelFailure"
    assert chain[0]["frames"][-1]["function"] == "ask_model"
    assert (chain[1]["type"], chain[1]["relation"]) == ("tests.fixtures.models.ProviderHTTPError", "cause")
    assert chain[1]["frames"][-1]["function"] == "_agenerate"  # where the provider call failed
