"""Building the run record: what one run's model was given, by id (db/run_record.py stores it).

`generate` writes it to the `record` channel as a `RecordedRun`; strings are stored inline
in the checkpoint's JSONB by the Postgres checkpointer, so each run's final checkpoint
carries its record (a few hundred bytes) and Postgres can read it without a blob; the
texts it points at live once elsewhere: messages in the `turn` channel versions, chunk
versions in `kb_chunks`, the system prompt in `system_prompts`, the summary in the same
checkpoint's `summary` channel, profile and facts in that checkpoint's channel versions.
`threads/record.py` resolves it; `retrieval/versions.py` reads `retrieved` in SQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

from chatbot.db.run_record import ChunkVersion, WindowByIds
from chatbot.responses import QuotedChunk

if TYPE_CHECKING:
    from chatbot.agent._window import Window


def prompt_sha256(text: str) -> str:
    """Return the hex sha256 of a system prompt's text (its key in `system_prompts`)."""
    return hashlib.sha256(text.encode()).hexdigest()


def chunk_versions(chunks: Sequence[QuotedChunk]) -> tuple[ChunkVersion, ...]:
    """Return the (chunk_id, version) pairs of retrieved chunks, in rank order."""
    return tuple((c.chunk_id, c.version) for c in chunks)


def chunk_refs(chunks: Sequence[QuotedChunk]) -> list[list[Any]]:
    """Return the same pairs as [chunk_id, version] lists: the `retrieved` channel's form."""
    return [list(pair) for pair in chunk_versions(chunks)]


def window_by_ids(window: Window, history: Sequence[BaseMessage]) -> WindowByIds:
    """Return the window's messages after the system message (history, then the question), by id.

    The window keeps a suffix of the history: then the first id and a count name it (a
    window of 60 messages costs ~60 bytes instead of ~2.3 KB). A window that left messages
    out of that suffix (orphan tool traffic of a broken history) lists every id. How the
    question and the system message were cut comes along: with the parts, the system
    message can be rebuilt exactly.
    """
    ids = [str(m.id) for m in window.messages[1:]]
    suffix = [str(m.id) for m in history[window.first_kept :]]
    cuts = window.cuts.stored() if window.cuts is not None else None
    if ids[:-1] == suffix:
        return WindowByIds(span=(ids[0], len(ids)), question_chars=window.question_chars, system_cuts=cuts)
    return WindowByIds(ids=tuple(ids), question_chars=window.question_chars, system_cuts=cuts)


def shortened_parts(window: Window) -> tuple[str, ...]:
    """Return what the window cut to fit: any of "chunks", "question", "system"."""
    cut = (
        ("chunks", window.chunks_shortened),
        ("question", window.question_shortened),
        ("system", window.system_shortened),
    )
    return tuple(part for part, shortened in cut if shortened)
