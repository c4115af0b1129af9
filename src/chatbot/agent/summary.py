"""Fold the turns that fall out of the window into a rolling summary.

The fold is incremental: the caller remembers up to which history index the summary
covers (`summarized_upto`), and each fold reads only the messages dropped since then.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from chatbot.agent.prompts import SUMMARY_LABELS, SUMMARY_PROMPTS, language_key

__all__ = ["SUMMARY_MAX_CHARS", "fold_summary", "messages_to_fold", "offline_summary"]

log = logging.getLogger(__name__)

# The summary rides in every window's system message: bounded so it cannot crowd out
# the chunks and recent turns (~500 Persian tokens at o200k's ~2.9 chars per token).
SUMMARY_MAX_CHARS = 1500
_QUESTION_CHARS = 160
_TOPIC_CHARS = 90
# Each dropped message is cut before it is sent to a summarising model, so a fold of many
# long turns stays one bounded call.
_TRANSCRIPT_MESSAGE_CHARS = 1200
_WHITESPACE = re.compile(r"\s+")
_CITATION = re.compile(r"\s*\[chunk:[^\]]*\]")
_SENTENCE_END = re.compile(r"(?<=[.!?؟])\s")


def messages_to_fold(history_len: int, summarized_upto: int, first_kept: int) -> tuple[int, int]:
    """Return the [start, end) history range newly dropped from the window; empty if none.

    `first_kept` comes from the window and always starts a turn, so the range holds
    whole turns. A window that grew back (a larger budget) folds nothing new.
    """
    start = max(0, min(summarized_upto, history_len))
    end = max(0, min(first_kept, history_len))
    return (start, end) if end > start else (start, start)


def _shorten(text: str, limit: int) -> str:
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "…"


def _citation_titles(message: BaseMessage) -> list[str]:
    """Return the titles (or ids) of the chunks an answer cited, from our metadata."""
    meta = message.additional_kwargs.get("chatbot")
    citations: Any = meta.get("citations") if isinstance(meta, dict) else None
    titles: list[str] = []
    for citation in citations if isinstance(citations, list) else []:
        if isinstance(citation, dict):
            label = citation.get("title") or citation.get("chunk_id")
        else:
            label = citation
        if label and str(label) not in titles:
            titles.append(str(label))
    return titles


def _topic(message: AIMessage) -> str:
    """Name what an answer was about: its cited chunk titles, else its first sentence."""
    titles = _citation_titles(message)
    if titles:
        return _shorten(", ".join(titles), _TOPIC_CHARS)
    text = _CITATION.sub("", str(message.text))
    first = _SENTENCE_END.split(_WHITESPACE.sub(" ", text).strip(), maxsplit=1)[0]
    return _shorten(first, _TOPIC_CHARS)


def _items(dropped: Sequence[BaseMessage], language: str) -> list[str]:
    """Return one summary line per dropped turn: the question and what was answered."""
    labels = SUMMARY_LABELS[language_key(language)]
    items: list[str] = []
    question: str | None = None
    topics: list[str] = []

    def flush() -> None:
        if question is None and not topics:
            return
        parts = [f"{labels.asked}: {question}"] if question else []
        if topics:
            parts.append(f"{labels.answered}: {' / '.join(topics)}")
        items.append("- " + labels.separator.join(parts))

    for message in dropped:
        if isinstance(message, HumanMessage):
            flush()
            question, topics = _shorten(str(message.text), _QUESTION_CHARS) or None, []
        elif isinstance(message, AIMessage) and str(message.text).strip():
            topic = _topic(message)
            if topic and topic not in topics:
                topics.append(topic)
        # Tool results and tool-call-only messages say nothing a reader of the summary needs.
    flush()
    return items


def _bound(lines: list[str], limit: int) -> str:
    """Join the newest lines that fit in `limit` characters; older lines give way."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        cost = len(line) + (1 if kept else 0)
        if size + cost > limit:
            if not kept:  # a single over-long line (say, a model's summary) keeps its end
                kept.append("…" + line[-(limit - 1) :])
            break
        kept.append(line)
        size += cost
    return "\n".join(reversed(kept))


def offline_summary(previous: str, dropped: Sequence[BaseMessage], language: str) -> str:
    """Append the dropped turns' questions and answered topics to `previous`, deterministically.

    Bounded to SUMMARY_MAX_CHARS, keeping the newest lines.
    """
    lines = [line for line in previous.splitlines() if line.strip()]
    return _bound(lines + _items(dropped, language), SUMMARY_MAX_CHARS)


def _transcript(dropped: Sequence[BaseMessage], language: str) -> str:
    fa = language_key(language) == "fa"
    roles = {"human": "کاربر" if fa else "User", "ai": "پشتیبان" if fa else "Assistant"}
    lines = []
    for message in dropped:
        role = roles.get(message.type)
        text = str(message.text).strip()
        if role and text:
            lines.append(f"{role}: {_shorten(text, _TRANSCRIPT_MESSAGE_CHARS)}")
    return "\n".join(lines)


async def fold_summary(
    previous: str,
    dropped: Sequence[BaseMessage],
    language: str,
    model: BaseChatModel | None,
    *,
    timeout: float = 30.0,
) -> str:
    """Return `previous` extended with the `dropped` messages, by `model` or offline.

    A failing or hanging model call keeps `previous` unchanged: a summary is never worth a
    failed run, nor a thread held past the model timeout.
    """
    if not dropped:
        return previous
    if model is None:
        return offline_summary(previous, dropped, language)
    fa = language_key(language) == "fa"
    heading_prev, heading_new = ("خلاصه قبلی", "ادامه گفت‌وگو") if fa else ("Previous summary", "Continuation")
    prompt = f"{heading_prev}:\n{previous.strip() or '-'}\n\n{heading_new}:\n{_transcript(dropped, language)}"
    try:
        instructions = SystemMessage(SUMMARY_PROMPTS[language_key(language)])
        async with asyncio.timeout(timeout):
            reply = await model.ainvoke([instructions, HumanMessage(prompt)])
        text = str(reply.text).strip()
    except Exception:  # any provider error; asyncio.CancelledError is not one and propagates
        log.warning("summary fold failed; keeping the previous summary", exc_info=True)
        return previous
    if not text:
        return previous
    return _bound([line for line in text.splitlines() if line.strip()], SUMMARY_MAX_CHARS)
