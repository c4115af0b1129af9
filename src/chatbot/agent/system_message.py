"""Compose the system message of the model window: prompt, profile, facts, summary, chunks, recalled turns.

Separate from the window builder so a run record can rebuild the exact text from its parts
(threads/record.py): `compose_system_text` is the one function both use, and the only place
sections are joined into the message (tests/foundation/test_shape.py holds every other module
to that), so the text a run sent and the text its replay shows cannot drift apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from chatbot.agent._prompts import SECTION_LABELS, TRUNCATION_MARKERS, SectionLabels, language_key
from chatbot.memory.pii import normalize_for_pii
from chatbot.recall.block import recalled_section
from chatbot.recall.service import RecalledTurn
from chatbot.responses import QuotedChunk
from chatbot.text import cut_at_word, looks_persian

__all__ = [
    "SystemCuts",
    "SystemParts",
    "compose_system_text",
    "cut_text",
    "format_system_prompt",
    "quote_memory",
    "recalled_part",
    "shorten_question",
]

# What separates the message's sections (prompt, memory, summary, chunks, recalled turns).
SECTION_BREAK = "\n\n"


@dataclass(frozen=True, kw_only=True)
class SystemParts:
    """What the system message is composed from: the prompt, memory, summary, chunks and recalled turns.

    The window composes from these, and a run record rebuilds the same text from the same
    parts read back by id (threads/record.py); `SystemCuts` says how they were cut to fit.
    """

    prompt: str
    profile: Mapping[str, JsonValue]
    facts: Sequence[str]
    summary: str
    chunks: Sequence[QuotedChunk]
    recalled: Sequence[RecalledTurn] = ()
    """Earlier turns of the thread recall gave for this question: the message's last section."""
    language: str = "en"
    """The run's language, which the recalled turns' section is written in (the other headings
    follow the prompt's script, as they always did)."""


@dataclass(frozen=True)
class SystemCuts:
    """How the system message was shortened to fit: with its parts, enough to rebuild it."""

    chunks_kept: int
    """How many of the retrieved chunks (best first) it holds."""
    chunk_permille: int = 1000
    """Each kept chunk's text cut to this share of its length (1000: whole)."""
    chunks_omitted: bool = False
    """No chunk fitted: the message says so instead of "nothing found"."""
    system_chars: int | None = None
    """The whole text cut to this many characters (a budget below prompt and memory)."""
    memory_format: int = 2
    """How memory is written: 2, quoted as the user's own words (`quote_memory`); 1, plain
    lines under "What we know about the user", as runs recorded before quoting were given it
    (a record without the field is rebuilt so, threads/record.py)."""

    def stored(self) -> dict[str, JsonValue]:
        """Return the cuts as a run record stores them (db/run_record.py `WindowByIds.system_cuts`)."""
        return {
            "chunks_kept": self.chunks_kept,
            "chunk_permille": self.chunk_permille,
            "chunks_omitted": self.chunks_omitted,
            "system_chars": self.system_chars,
            "memory_format": self.memory_format,
        }

    @classmethod
    def from_stored(cls, stored: Mapping[str, JsonValue]) -> SystemCuts:
        """Return the cuts a run record stored; a record written before memory was quoted has no
        `memory_format` and is rebuilt as format 1."""
        chars = stored.get("system_chars")
        return cls(
            chunks_kept=_int(stored.get("chunks_kept"), 0),
            chunk_permille=_int(stored.get("chunk_permille"), 1000),
            chunks_omitted=stored.get("chunks_omitted") is True,
            system_chars=chars if isinstance(chars, int) else None,
            memory_format=_int(stored.get("memory_format"), 1),
        )


def _int(value: JsonValue, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def cut_text(text: str, length: int, marker: str) -> str:
    """Return the first `length` characters of `text`, ended on a word boundary, plus `marker`.

    Run records rebuild the window with this same cut (threads/record.py), so what it keeps
    must not change: a word boundary within 30 characters reads better than a split word.
    """
    return cut_at_word(text, length, min_keep=max(1, length - 30), marker=marker)


def shorten_question(text: str, length: int) -> str:
    """Return the question as the window sends it when only `length` characters of it fit."""
    return cut_text(text, length, TRUNCATION_MARKERS["fa" if looks_persian(text) else "en"])


# Line breaks, controls and invisible format characters (category C*, Z* other than the
# space): a remembered statement is one line, so nothing in it can start a heading or a turn.
_BREAKS = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u206f"
    r"\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e0fff\s]+"
)
# Characters that shape a prompt (heading, fence, special tokens): shown as lookalikes that shape nothing.
_SHAPERS = str.maketrans({"#": "＃", "`": "ˋ", "<": "‹", ">": "›", "|": "¦", "[": "⁅", "]": "⁆", "*": "∗"})
# A word then a colon reads as a speaker's turn ("System:", "assistant :"): the colon goes.
_ROLE_MARKER = re.compile(r"([^\W\d_]+)(\s*)[:：﹕꞉]")
_ROLE_WORDS = frozenset(
    "system assistant user developer human ai bot model tool instruction instructions admin"
    " سیستم دستیار کاربر ربات مدل دستور".split()
)


def quote_memory(text: str) -> str:
    """Return remembered text as quoted data: one line, in quotes, nothing shaped like a prompt.

    Memory is what users said, stored; the model must read it as their words, never as an
    instruction, so headings, fences, role markers and special tokens are defused here.
    """
    line = _BREAKS.sub(" ", text).strip()
    line = _ROLE_MARKER.sub(_drop_role_colon, line.translate(_SHAPERS))
    return json.dumps(line, ensure_ascii=False)


def _drop_role_colon(match: re.Match[str]) -> str:
    word = match.group(1)
    if normalize_for_pii(word).strip() in _ROLE_WORDS:
        return f"{word}{match.group(2)} -"
    return match.group(0)


# A profile value that is an identifier ("third_party", "children:2") cannot shape a prompt:
# shown bare, as the profile's typed slots always were.
_IDENTIFIER = re.compile(r"[^\W_][\w:\-]{0,63}")


def _render_plain(value: JsonValue) -> str:
    """Render a profile value as memory format 1 did (no quoting)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _render_value(value: JsonValue) -> str:
    if isinstance(value, str):
        bare = _IDENTIFIER.fullmatch(value) and _ROLE_MARKER.sub(_drop_role_colon, value) == value
        return value if bare else quote_memory(value)
    if isinstance(value, list):
        return "[" + ", ".join(_render_value(str(v)) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_render_value(str(k))}: {_render_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return quote_memory(json.dumps(value, ensure_ascii=False, default=str))


def _memory_sections(
    labels: SectionLabels, profile: Mapping[str, JsonValue], facts: Sequence[str], memory_format: int
) -> list[str]:
    """Return the profile and facts sections: quoted data (format 2), or plain lines (format 1)."""
    quoted = memory_format >= 2
    # Profile and facts come from what users wrote: every value is quoted data (`quote_memory`).
    profile_lines = [
        f"- {_BREAKS.sub(' ', str(key)).translate(_SHAPERS)}: {_render_value(value)}"
        if quoted
        else f"- {key}: {_render_plain(value)}"
        for key, value in profile.items()
        if value not in (None, "", [], {})
    ]
    fact_lines = [f"- {quote_memory(fact) if quoted else fact.strip()}" for fact in facts if fact.strip()]
    sections = []
    if profile_lines:
        sections.append(f"## {labels.profile}\n" + "\n".join(profile_lines))
    if fact_lines:
        sections.append(f"## {labels.facts if quoted else labels.facts_plain}\n" + "\n".join(fact_lines))
    return sections


def format_system_prompt(
    system_prompt: str,
    *,
    profile: Mapping[str, JsonValue],
    facts: Sequence[str],
    summary: str,
    chunks: Sequence[QuotedChunk],
    language: str | None = None,
    chunks_omitted: bool = False,
    memory_format: int = 2,
) -> str:
    """Compose the system message text: prompt, profile, facts, summary, knowledge chunks.

    `language` picks the section headings; by default they follow the prompt's script.
    `chunks_omitted` says the chunks were left out for room, not that none was found.
    `memory_format` 1 writes memory as runs recorded before quoting were given it (`SystemCuts`).
    """
    lang = language_key(language) if language else ("fa" if looks_persian(system_prompt) else "en")
    labels = SECTION_LABELS[lang]
    parts = [system_prompt.strip()]
    parts.extend(_memory_sections(labels, profile, facts, memory_format))
    if summary.strip():
        parts.append(f"## {labels.summary}\n{summary.strip()}")
    rendered = []
    for chunk in chunks:
        title = chunk.title.strip()
        header = f"[chunk:{chunk.chunk_id}]" + (f" {title}" if title else "")
        rendered.append(f"{header}\n{chunk.text.strip()}".rstrip())
    empty = labels.chunks_omitted if chunks_omitted else labels.no_chunks
    parts.append(f"## {labels.chunks}\n" + ("\n\n".join(rendered) if rendered else empty))
    return SECTION_BREAK.join(parts)


def recalled_part(turns: Sequence[RecalledTurn], language: str) -> str:
    """Return the recalled turns' section as it closes the system message, its break included ("" for none).

    The recall step sizes its share of the budget with it (agent/_recall.py); the text is
    the one `compose_system_text` appends.
    """
    body = recalled_section(turns, language)
    return SECTION_BREAK + body if body else ""


def compose_system_text(parts: SystemParts, cuts: SystemCuts) -> str:
    """Return the system message text the window sends, from its parts and how they were cut.

    The window gives its chunks; a run record rebuilding the message gives the versions it
    cites (threads/record.py `ResolvedRun.chunks`). Recalled turns close the message after
    any cut: recall only joins a window that cut nothing (agent/_recall.py).
    """
    lang = "fa" if looks_persian(parts.prompt) else "en"
    marker = TRUNCATION_MARKERS[lang]
    kept: list[QuotedChunk] = []
    for chunk in parts.chunks[: cuts.chunks_kept]:
        text = chunk.text
        kept.append(chunk.model_copy(update={"text": cut_text(text, len(text) * cuts.chunk_permille // 1000, marker)}))
    full = format_system_prompt(
        parts.prompt,
        profile=parts.profile,
        facts=parts.facts,
        summary=parts.summary,
        chunks=kept,
        language=lang,
        chunks_omitted=cuts.chunks_omitted,
        memory_format=cuts.memory_format,
    )
    cut = full if cuts.system_chars is None else cut_text(full, cuts.system_chars, marker)
    return cut + recalled_part(parts.recalled, parts.language)
