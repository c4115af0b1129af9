"""Compose the system message of the model window: prompt, profile, facts, summary, chunks.

Separate from the window builder so a run record can rebuild the exact text from its parts
(threads/record.py): `compose_system_text` is the one function both use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chatbot.agent._prompts import SECTION_LABELS, TRUNCATION_MARKERS, language_key
from chatbot.text import cut_at_word, looks_persian

__all__ = ["SystemCuts", "compose_system_text", "cut_text", "format_system_prompt", "shorten_question"]


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


def cut_text(text: str, length: int, marker: str) -> str:
    """Return the first `length` characters of `text`, ended on a word boundary, plus `marker`.

    Run records rebuild the window with this same cut (threads/record.py), so what it keeps
    must not change: a word boundary within 30 characters reads better than a split word.
    """
    return cut_at_word(text, length, min_keep=max(1, length - 30), marker=marker)


def shorten_question(text: str, length: int) -> str:
    """Return the question as the window sends it when only `length` characters of it fit."""
    return cut_text(text, length, TRUNCATION_MARKERS["fa" if looks_persian(text) else "en"])


def _render_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def format_system_prompt(
    system_prompt: str,
    *,
    profile: Mapping[str, Any],
    facts: Sequence[str],
    summary: str,
    chunks: Sequence[Mapping[str, Any]],
    language: str | None = None,
    chunks_omitted: bool = False,
) -> str:
    """Compose the system message text: prompt, profile, facts, summary, knowledge chunks.

    `language` picks the section headings; by default they follow the prompt's script.
    `chunks_omitted` says the chunks were left out for room, not that none was found.
    """
    lang = language_key(language) if language else ("fa" if looks_persian(system_prompt) else "en")
    labels = SECTION_LABELS[lang]
    parts = [system_prompt.strip()]
    profile_lines = [
        f"- {key}: {_render_value(value)}" for key, value in profile.items() if value not in (None, "", [], {})
    ]
    if profile_lines:
        parts.append(f"## {labels.profile}\n" + "\n".join(profile_lines))
    fact_lines = [f"- {fact.strip()}" for fact in facts if fact.strip()]
    if fact_lines:
        parts.append(f"## {labels.facts}\n" + "\n".join(fact_lines))
    if summary.strip():
        parts.append(f"## {labels.summary}\n{summary.strip()}")
    rendered = []
    for chunk in chunks:
        title = str(chunk.get("title") or "").strip()
        header = f"[chunk:{chunk.get('chunk_id', '?')}]" + (f" {title}" if title else "")
        rendered.append(f"{header}\n{str(chunk.get('text') or '').strip()}".rstrip())
    empty = labels.chunks_omitted if chunks_omitted else labels.no_chunks
    parts.append(f"## {labels.chunks}\n" + ("\n\n".join(rendered) if rendered else empty))
    return "\n\n".join(parts)


def compose_system_text(
    system_prompt: str,
    *,
    profile: Mapping[str, Any],
    facts: Sequence[str],
    summary: str,
    chunks: Sequence[Mapping[str, Any]],
    cuts: SystemCuts,
) -> str:
    """Return the system message text the window sends, from its parts and how they were cut."""
    lang = "fa" if looks_persian(system_prompt) else "en"
    marker = TRUNCATION_MARKERS[lang]
    kept = []
    for chunk in chunks[: cuts.chunks_kept]:
        text = str(chunk.get("text") or "")
        kept.append({**chunk, "text": cut_text(text, len(text) * cuts.chunk_permille // 1000, marker)})
    full = format_system_prompt(
        system_prompt,
        profile=profile,
        facts=facts,
        summary=summary,
        chunks=kept,
        language=lang,
        chunks_omitted=cuts.chunks_omitted,
    )
    return full if cuts.system_chars is None else cut_text(full, cuts.system_chars, marker)
