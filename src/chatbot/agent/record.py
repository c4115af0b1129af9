"""The run record: a compact account, ids only, of what one run's model was given.

`generate` writes it to the `record` channel as a JSON string. Strings are stored inline
in the checkpoint's JSONB by the Postgres checkpointer, so each run's final checkpoint
carries its record (a few hundred bytes) and Postgres can read it without a blob; the
texts it points at live once elsewhere: messages in the `turn` channel versions, chunk
versions in `kb_chunks`, the system prompt in `system_prompts`, the summary in the same
checkpoint's `summary` channel, profile and facts in that checkpoint's channel versions.
`threads/record.py` resolves it; `retrieval/versions.py` reads `retrieved` in SQL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

if TYPE_CHECKING:
    from chatbot.agent.window import Window

RECORD_FORMAT = 1


def prompt_sha256(text: str) -> str:
    """Return the hex sha256 of a system prompt's text (its key in `system_prompts`)."""
    return hashlib.sha256(text.encode()).hexdigest()


def chunk_refs(chunks: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Return the [chunk_id, version] pairs of retrieved chunks, in rank order."""
    return [[str(c["chunk_id"]), int(c.get("version") or 1)] for c in chunks]


def window_ids(window: Window, history: Sequence[BaseMessage]) -> dict[str, Any]:
    """Return the window's messages after the system message (history, then the question), by id.

    The window keeps a suffix of the history: then the first id and a count name it (a
    window of 60 messages costs ~60 bytes instead of ~2.3 KB). A window that left messages
    out of that suffix (orphan tool traffic of a broken history) lists every id.
    """
    ids = [str(m.id) for m in window.messages[1:]]
    suffix = [str(m.id) for m in history[window.first_kept :]]
    if ids[:-1] == suffix:
        return {"window_span": [ids[0], len(ids)]}
    return {"window": ids}


def encode_record(record: dict[str, Any]) -> str:
    """Return the record as compact JSON, tagged with its format."""
    return json.dumps({"format": RECORD_FORMAT, **record}, ensure_ascii=False, separators=(",", ":"))


def decode_record(raw: object) -> dict[str, Any] | None:
    """Return a record read from a checkpoint, or None when there is none (or it is not ours)."""
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value.get("format") == RECORD_FORMAT else None
