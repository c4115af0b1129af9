"""The run record as stored: one type that writes it and reads it back.

A run record is the ids-only account of one run (docs/records.md): `generate` writes it to
the `record` channel (agent/nodes.py, agent/record.py), a cancelled run's replica writes its
end (threads/runs.py), the record endpoint and `chatbot replay` resolve it
(threads/record.py), and the memory worker reads whether the run ended answered
(memory/jobs.py). It is a compact JSON string, which the Postgres checkpointer keeps inline
in the checkpoint's JSONB, so Postgres reads it without a blob (`CITED_CHUNK_VERSIONS` in
db/langgraph_tables.py reads `retrieved`).

It lives below the features because three of them use it and memory may import none of
the others (tests/foundation/test_layers.py).

Every shape stored so far is `format` 1, and `RecordedRun.parse` reads each:
- partial (written by `retrieve`, left by a run that failed after it): run_id, model,
  retrieved;
- finished (`generate`): run_id, status, model, answer_id, input_id, system_prompt_sha256,
  the window (`window_span`, or `window` listing every id), question_chars, system_cuts,
  shortened, retrieved, recalled (only when recall gave turns), settings; a failed model
  call adds reason and shown. Records
  written before the model chain have no usage, the first ones no system_cuts, and they
  list the window's ids;
- cancelled (threads/runs.py): run_id, status, reason, model, answer_id, shown, input_id,
  retrieved, usage.
A run's first checkpoint holds "" (no record). Keys this type does not know are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from chatbot.ids import RunId

RECORD_FORMAT = 1

ChunkVersion = tuple[str, int]
"""(chunk_id, version): names one immutable `kb_chunks` row."""


@dataclass(frozen=True, slots=True)
class WindowByIds:
    """The window the model got after the system message (history, then the question), by id.

    Either a span of the transcript (its first message's id and how many messages) or,
    when the window left messages out of that stretch, every id in order.
    """

    span: tuple[str, int] | None = None
    ids: tuple[str, ...] = ()
    question_chars: int | None = None
    """The question's kept length when the window cut it, else None."""
    system_cuts: dict[str, JsonValue] | None = None
    """How the system message was cut (agent/system_message.py `SystemCuts.stored`)."""

    def dump(self) -> dict[str, JsonValue]:
        """Return the window's keys of the stored record (None kept as null, as written)."""
        named: dict[str, JsonValue] = (
            {"window_span": [self.span[0], self.span[1]]} if self.span else {"window": list(self.ids)}
        )
        return named | {"question_chars": self.question_chars, "system_cuts": self.system_cuts}

    @classmethod
    def parse(cls, value: Mapping[str, JsonValue]) -> WindowByIds | None:
        """Return the window a stored record names, None when it names none."""
        span, ids = _span(value.get("window_span")), _texts(value.get("window"))
        if span is None and ids is None:
            return None
        return cls(
            span, () if span else ids or (), _int(value.get("question_chars")), _object(value.get("system_cuts"))
        )


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """One run's record, ids and settings only; the fields are in the stored key order.

    A field left None is not stored (`retrieved` always is). A record without `status` is
    partial: the run failed, or has not ended yet.
    """

    run_id: RunId
    status: str | None = None
    reason: str | None = None
    """Why the run failed (failures.py), on `error` and `cancelled`."""
    model: str | None = None
    """The model chain entry that answered (or was tried last)."""
    answer_id: str | None = None
    shown: str | None = None
    """The answer text the user was shown before a failure: the only text a record carries."""
    usage: tuple[dict[str, JsonValue], ...] | None = None
    """One entry per model call (`responses.ModelCallUsage.model_dump()`)."""
    input_id: str | None = None
    system_prompt_sha256: str | None = None
    window: WindowByIds | None = None
    shortened: tuple[str, ...] | None = None
    """What the window cut to fit: any of "chunks", "question", "system"."""
    retrieved: tuple[ChunkVersion, ...] = ()
    """The retrieved chunk versions, in rank order."""
    recalled: tuple[str, ...] = ()
    """The message ids of the earlier turns recall gave the model, in the order given
    (recall/); stored only when there are some, so a record without recall is as before."""
    settings: dict[str, JsonValue] | None = None
    """The settings that shaped the window (context_tokens, tokenizer, language, ...)."""

    def dump(self) -> str:
        """Return the record as stored: compact JSON, tagged with its format."""
        return json.dumps(self.as_json(), ensure_ascii=False, separators=(",", ":"))

    def as_json(self) -> dict[str, JsonValue]:
        """Return the stored JSON object (before encoding)."""
        head: dict[str, JsonValue] = {
            "status": self.status,
            "reason": self.reason,
            "model": self.model,
            "answer_id": self.answer_id,
            "shown": self.shown,
            "usage": None if self.usage is None else list(self.usage),
            "input_id": self.input_id,
            "system_prompt_sha256": self.system_prompt_sha256,
        }
        out: dict[str, JsonValue] = {"format": RECORD_FORMAT, "run_id": self.run_id}
        out |= {k: v for k, v in head.items() if v is not None}
        if self.window is not None:
            out |= self.window.dump()
        if self.shortened is not None:
            out["shortened"] = list(self.shortened)
        out["retrieved"] = [list(ref) for ref in self.retrieved]
        if self.recalled:
            out["recalled"] = list(self.recalled)
        if self.settings is not None:
            out["settings"] = self.settings
        return out

    @classmethod
    def parse(cls, raw: object) -> RecordedRun | None:
        """Return the record a checkpoint holds, None when it holds none (or one that is not ours)."""
        value = _json_object(raw)
        run_id = None if value is None else value.get("run_id")
        if value is None or value.get("format") != RECORD_FORMAT or not isinstance(run_id, str):
            return None
        usage = value.get("usage")
        return cls(
            run_id=RunId(run_id),
            status=_text(value.get("status")) or None,  # an empty status never ended a run
            reason=_text(value.get("reason")),
            model=_text(value.get("model")),
            answer_id=_text(value.get("answer_id")),
            shown=_text(value.get("shown")),
            usage=tuple(u for u in usage if isinstance(u, dict)) if isinstance(usage, list) else None,
            input_id=_text(value.get("input_id")),
            system_prompt_sha256=_text(value.get("system_prompt_sha256")),
            window=WindowByIds.parse(value),
            shortened=_texts(value.get("shortened")),
            retrieved=_chunk_versions(value.get("retrieved")),
            recalled=_texts(value.get("recalled")) or (),
            settings=_object(value.get("settings")),
        )


def _json_object(raw: object) -> dict[str, JsonValue] | None:
    if not isinstance(raw, str) or not raw.startswith("{"):
        return None  # "" in a run's first checkpoint
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _object(value: JsonValue) -> dict[str, JsonValue] | None:
    return value if isinstance(value, dict) else None


def _texts(value: object) -> tuple[str, ...] | None:
    return tuple(str(v) for v in value) if isinstance(value, list) else None


def _span(value: object) -> tuple[str, int] | None:
    if isinstance(value, list) and len(value) == 2 and _int(value[1]) is not None:
        return str(value[0]), int(value[1])
    return None


def _chunk_versions(value: object) -> tuple[ChunkVersion, ...]:
    pairs = value if isinstance(value, list) else []
    return tuple(
        (str(p[0]), int(p[1])) for p in pairs if isinstance(p, list) and len(p) == 2 and _int(p[1]) is not None
    )
