"""Evaluation cases: the JSON Lines dataset format, and the window a rated run recorded."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from pydantic import JsonValue

from chatbot.recall.service import RecalledTurn
from chatbot.responses import QuotedChunk
from chatbot.text import looks_persian

STATUSES = ("answered", "clarifying", "escalate")
Role = Literal["user", "assistant"]


class DatasetError(ValueError):
    """A dataset line is not a case: the message names the file, the line and the field."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier message of a case's conversation."""

    role: Role
    content: str
    id: str | None = None
    """The message id a recorded window gave it (None for dataset history)."""


@dataclass(frozen=True, slots=True)
class RecordedWindow:
    """What a past run's model was given, besides its history: read back from its run record."""

    summary: str
    profile: Mapping[str, JsonValue]
    facts: tuple[str, ...]
    chunks: tuple[QuotedChunk, ...]
    """The retrieved chunks as they read then, in rank order."""
    context_tokens: int | None
    """The window budget the run was built with; None: today's setting."""
    recalled: tuple[RecalledTurn, ...] = ()
    """The earlier turns of the thread recall gave the run's model, in the order given."""


class Expectation(TypedDict):
    """A case's expectation as report.json shows it; `section` only when the case names one."""

    status: str | None
    citations: list[str]
    section: NotRequired[str]


@dataclass(frozen=True, slots=True)
class Case:
    """One question to put to every candidate model."""

    id: str
    question: str
    locale: str
    expect_status: str | None = None
    expect_citations: tuple[str, ...] = ()
    history: tuple[Turn, ...] = ()
    expect_section: str | None = None
    """The heading path of the section that answers (`Document › Heading`), when labelled."""
    reference: str | None = None
    """The answer given when the case was recorded (`--from-feedback`), else None."""
    window: RecordedWindow | None = field(default=None, compare=False)
    """The recorded window of a `--from-feedback` case; None: retrieve and remember as a live run would."""

    @property
    def expect(self) -> Expectation | None:
        """Return the expectation as the report shows it (None when the case has none)."""
        if self.expect_status is None and not self.expect_citations:
            return None
        expect = Expectation(status=self.expect_status, citations=list(self.expect_citations))
        if self.expect_section is not None:
            expect["section"] = self.expect_section
        return expect


def default_locale(question: str) -> str:
    """Return the locale of a case that names none: Persian for Persian text, else English."""
    return "fa-IR" if looks_persian(question) else "en-US"


def load_dataset(path: Path) -> list[Case]:
    """Return the cases of a JSON Lines file, in order; raise DatasetError on the first bad line.

    The whole file is read and checked before any case runs: a bad line found after an hour
    of model calls would waste them all.
    """
    try:
        # Lines end at LF (CRLF too) only: JSON Lines' separator. `str.splitlines` would also
        # cut at U+2028, U+2029 or U+0085, which a question may hold raw inside its JSON string.
        lines = [line.removesuffix("\r") for line in path.read_text(encoding="utf-8").split("\n")]
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read it ({type(exc).__name__})") from None
    cases: list[Case] = []
    seen: set[str] = set()
    for number, line in _numbered(lines):
        where = f"{path}:{number}"
        try:
            raw = json.loads(line)
        except ValueError:
            raise DatasetError(f"{where}: not a JSON object") from None
        except RecursionError:
            raise DatasetError(f"{where}: nested too deep to be a case") from None
        case = parse_case(raw, where)
        if case.id in seen:
            raise DatasetError(f"{where}: id {case.id!r} is used twice")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise DatasetError(f"{path}: no cases")
    return cases


def _numbered(lines: list[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, line


# U+0000 and unpaired surrogates (a JSON escape such as "\ud800" decodes to one) cannot be
# encoded as UTF-8: sent to a model or written to the report, they would fail after the cases ran.
_UNENCODABLE = re.compile("[\x00\ud800-\udfff]")


def _encodable(value: Any, where: str) -> None:
    """Refuse a line holding, in any string of it, text that cannot be sent or written as UTF-8."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and _UNENCODABLE.search(item):
            raise DatasetError(f"{where}: a string holds U+0000 or an unpaired surrogate")
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def parse_case(raw: Any, where: str) -> Case:
    """Return the case of one dataset line; `where` prefixes any error."""
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: not a JSON object")
    _encodable(raw, where)
    unknown = set(raw) - {"id", "question", "locale", "expect", "history"}
    if unknown:
        raise DatasetError(f"{where}: unknown fields {sorted(unknown)}")
    case_id, question = raw.get("id"), raw.get("question")
    if not isinstance(case_id, str) or not case_id.strip():
        raise DatasetError(f"{where}: `id` must be a non-empty string")
    if not isinstance(question, str) or not question.strip():
        raise DatasetError(f"{where}: `question` must be a non-empty string")
    locale = raw.get("locale") or default_locale(question)
    if not isinstance(locale, str):
        raise DatasetError(f"{where}: `locale` must be a string such as fa-IR or en-US")
    status, citations = _expect(raw.get("expect"), where)
    section = (raw.get("expect") or {}).get("section")
    return Case(case_id, question, locale, status, citations, _history(raw.get("history"), where), section)


def _expect(raw: Any, where: str) -> tuple[str | None, tuple[str, ...]]:
    if raw is None:
        return None, ()
    if not isinstance(raw, dict) or set(raw) - {"status", "citations", "section"}:
        raise DatasetError(f'{where}: `expect` must be {{"status", "citations", "section"}}')
    if not isinstance(raw.get("section", ""), str):
        raise DatasetError(f"{where}: `expect.section` must be a heading path such as 'Travel insurance › Other cover'")
    status = raw.get("status")
    if status is not None and status not in STATUSES:
        raise DatasetError(f"{where}: `expect.status` must be one of {', '.join(STATUSES)}")
    citations = raw.get("citations") or []
    if not isinstance(citations, list) or not all(isinstance(c, str) and c for c in citations):
        raise DatasetError(f"{where}: `expect.citations` must be a list of document or chunk ids")
    return status, tuple(citations)


def _history(raw: Any, where: str) -> tuple[Turn, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DatasetError(f'{where}: `history` must be a list of {{"role", "content"}}')
    turns = []
    for index, item in enumerate(raw):
        if (
            not isinstance(item, dict)
            or item.get("role") not in ("user", "assistant")
            or not isinstance(item.get("content"), str)
        ):
            raise DatasetError(f'{where}: `history[{index}]` must be {{"role": "user"|"assistant", "content"}}')
        turns.append(Turn(item["role"], item["content"]))
    return tuple(turns)
