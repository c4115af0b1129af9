"""Fold the turns that fall out of the window into a rolling summary.

The fold is incremental: the caller remembers up to which history index the summary
covers (`summarized_upto`), and each fold reads only the messages dropped since then.

A summary has two parts: the opening (what the conversation started with: the customer's
issue, the product, the claim) and the latest turns. Within its bound the opening is
pinned and the middle gives way, because the opening is what a summary exists to keep and
the latest turns are what the next answer most likely builds on. Once the two parts are
told apart, a line holding only OPENING_END separates them; the summary stays one string
(one state channel, readable as it is in the model window and the hand-off).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from chatbot import metrics
from chatbot.agent._prompts import SUMMARY_LABELS, SUMMARY_PROMPTS, language_key
from chatbot.models.chain import ChainEntry
from chatbot.models.usage import usage_from_metadata
from chatbot.responses import ModelCallUsage
from chatbot.text import cut_at_word
from chatbot.turns import message_meta

__all__ = [
    "OPENING_END",
    "OPENING_MAX_CHARS",
    "SUMMARY_MAX_CHARS",
    "fold_summary",
    "messages_to_fold",
    "offline_summary",
    "split_opening",
]

log = logging.getLogger(__name__)

# The summary rides in every window's system message: bounded so it cannot crowd out
# the chunks and recent turns (~500 Persian tokens at o200k's ~2.9 chars per token).
SUMMARY_MAX_CHARS = 1500
# The pinned opening's share: two or three offline lines (question + topic), or a model's
# opening paragraph; the rest of the bound goes to the latest turns.
OPENING_MAX_CHARS = 600
# The line between the opening and the latest turns; it reads as "and later" to the model
# and to the human assistant who gets the summary in a hand-off.
OPENING_END = "…"
_QUESTION_CHARS = 160
_TOPIC_CHARS = 90
# Each dropped message is cut before it is sent to a summarising model, so a fold of many
# long turns stays one bounded call.
_TRANSCRIPT_MESSAGE_CHARS = 1200
# A reply this long is no summary (a transcript echoed back, a page of HTML): discarded, not
# cut, and the fold retried on a later turn. Shorter replies over the bound are cut (`_bound`).
SUMMARY_REPLY_MAX_CHARS = 4 * SUMMARY_MAX_CHARS
# What a gateway or a provider sends with status 200 in place of a reply (peers report such
# bodies becoming the summary): an error's opening words, a JSON error object, an HTML page.
_LOOKS_LIKE_AN_ERROR = re.compile(
    r"""^\W{0,3}(?:
        \{\s*"?(?:error|detail|message|status)"?\s*:
      | <(?:!doctype|html|head|body)\b
      | (?:an?\s+)?(?:unexpected\s+|internal\s+)?(?:error|exception)\b
      | (?:internal\s+server\s+error|bad\s+gateway|service\s+(?:temporarily\s+)?unavailable|gateway\s+time-?out)\b
      | (?:rate\s+limit|too\s+many\s+requests|quota\s+exceeded|request\s+(?:failed|timed\s+out))\b
      | upstream\s+(?:connect\s+)?error\b
      | traceback\s+\(most\s+recent\s+call\s+last\)
      | (?:status|http)\s*[:=]?\s*[45]\d\d\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)
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
    return cut_at_word(_WHITESPACE.sub(" ", text).strip(), limit, min_keep=limit // 2 + 1, marker="…")


def _cited(message: BaseMessage) -> list[str]:
    """Return the ids of the chunks an answer cited (our metadata keeps ids, validated), each once."""
    return list(dict.fromkeys(c for c in message_meta(message).get("citations", []) if c))


def _topic(message: AIMessage) -> str:
    """Name what an answer was about: the chunks it cited, else its first sentence."""
    cited = _cited(message)
    if cited:
        return _shorten(", ".join(cited), _TOPIC_CHARS)
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


def _head(lines: list[str], limit: int) -> list[str]:
    """Return the oldest lines that fit in `limit` characters; an over-long first line keeps its start."""
    kept: list[str] = []
    size = 0
    for line in lines:
        cost = len(line) + (1 if kept else 0)
        if size + cost > limit:
            if not kept:
                kept.append(line[: limit - 1].rstrip() + "…")
            break
        kept.append(line)
        size += cost
    return kept


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and line.strip() != OPENING_END]


def split_opening(summary: str) -> tuple[str, str] | None:
    """Return a summary's (opening, latest turns), or None when it has no pinned opening yet."""
    lines = summary.splitlines()
    for index, line in enumerate(lines):
        if line.strip() == OPENING_END:
            opening = "\n".join(_lines("\n".join(lines[:index])))
            return opening, "\n".join(_lines("\n".join(lines[index + 1 :])))
    return None


def _join(opening: list[str], latest: list[str]) -> str:
    return "\n".join([*opening, OPENING_END, *latest])


def _bound_keeping_opening(previous: str, new_lines: list[str], limit: int) -> str:
    """Join `previous` and `new_lines` within `limit`: the opening stays, the middle gives way."""
    parts = split_opening(previous)
    if parts is None:
        lines = _lines(previous) + new_lines
        if len("\n".join(lines)) <= limit:
            return "\n".join(lines)
        opening = _head(lines, OPENING_MAX_CHARS)
        rest = lines[len(opening) :]
    else:
        opening, rest = _lines(parts[0]), _lines(parts[1]) + new_lines
    # What is left once the opening and its separator line are in.
    room = limit - len("\n".join(opening)) - len(OPENING_END) - 2
    return _join(opening, _bound(rest, room).splitlines())


def offline_summary(previous: str, dropped: Sequence[BaseMessage], language: str) -> str:
    """Append the dropped turns' questions and answered topics to `previous`, deterministically.

    Bounded to SUMMARY_MAX_CHARS: the opening lines stay, then the newest lines that fit.
    """
    return _bound_keeping_opening(previous, _items(dropped, language), SUMMARY_MAX_CHARS)


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


# The model's task, per fold. The first fold writes the opening, which is pinned from
# then on; later folds rewrite only what followed it, so no rewrite can lose the opening.
_OPENING_TASK = {
    "fa": (
        "گفت‌وگو تا اینجا:\n{transcript}\n\n"
        "آغاز این گفت‌وگو را در حداکثر ۸۰ کلمه خلاصه کنید: مشکل یا درخواست مشتری، بیمه‌نامه یا محصول، و "
        "شماره پرونده یا بیمه‌نامه اگر گفته شده. این بخش خلاصه تا پایان گفت‌وگو همین‌طور می‌ماند."
    ),
    "en": (
        "The conversation so far:\n{transcript}\n\n"
        "Summarise how this conversation opened, in at most 80 words: the customer's issue or request, "
        "the product or policy, and any claim or policy reference given. This part of the summary is "
        "kept as it is for the rest of the conversation."
    ),
}
_CONTINUATION_TASK = {
    "fa": (
        "آغاز گفت‌وگو (همین‌طور می‌ماند؛ تکرارش نکنید):\n{opening}\n\n"
        "خلاصه آنچه پس از آن گذشت:\n{latest}\n\nادامه گفت‌وگو:\n{transcript}\n\n"
        "خلاصه به‌روز آنچه پس از آغاز گفت‌وگو گذشت را در حداکثر ۱۲۰ کلمه بنویسید."
    ),
    "en": (
        "How the conversation opened (kept as it is; do not repeat it):\n{opening}\n\n"
        "Summary of what followed:\n{latest}\n\nContinuation:\n{transcript}\n\n"
        "Write the updated summary of what followed the opening, in at most 120 words."
    ),
}


async def fold_summary(
    previous: str,
    dropped: Sequence[BaseMessage],
    language: str,
    model: ChainEntry | BaseChatModel | None,
    *,
    timeout: float = 5.0,
    on_usage: Callable[[ModelCallUsage], None] | None = None,
) -> str:
    """Return `previous` extended with the `dropped` messages, by `model` or offline.

    With a model, the first fold's reply becomes the pinned opening and each later fold
    rewrites only the part after it. A failing or hanging model call keeps `previous`
    unchanged after at most `timeout` seconds: the fold runs before the answer, so it
    bounds how long it may delay the first token, and a summary is never worth a failed run.
    """
    if not dropped:
        return previous
    if model is None:
        return offline_summary(previous, dropped, language)
    if isinstance(model, BaseChatModel):
        model = ChainEntry(f"custom:{type(model).__name__}", model)
    key = language_key(language)
    parts = split_opening(previous)
    # A summary without a separator is all opening (a first model fold, or an offline one).
    opening = _head(_lines(parts[0] if parts else previous), OPENING_MAX_CHARS)
    latest = _lines(parts[1]) if parts else []
    transcript = _transcript(dropped, language)
    if opening:
        task = _CONTINUATION_TASK[key].format(
            opening="\n".join(opening), latest="\n".join(latest) or "-", transcript=transcript
        )
    else:
        task = _OPENING_TASK[key].format(transcript=transcript)
    try:
        instructions = SystemMessage(SUMMARY_PROMPTS[key])
        async with asyncio.timeout(timeout):
            reply = await model.model.ainvoke([instructions, HumanMessage(task)])
        text = str(reply.text).strip()
    except Exception as exc:  # any provider error; asyncio.CancelledError is not one and propagates
        outcome = "timeout" if isinstance(exc, TimeoutError) else "failed"
        metrics.MODEL_CALLS.labels(model=model.spec, kind="summary", outcome=outcome).inc()
        if on_usage is not None:
            on_usage(ModelCallUsage(kind="summary", model=model.spec))
        log.warning("summary fold failed; keeping the previous summary", extra={"error": type(exc).__name__})
        return previous
    metrics.MODEL_CALLS.labels(model=model.spec, kind="summary", outcome="ok").inc()
    if on_usage is not None:
        on_usage(usage_from_metadata("summary", model.spec, getattr(reply, "usage_metadata", None)))
    if not _lines(text):
        return previous
    if len(text) > SUMMARY_REPLY_MAX_CHARS or _LOOKS_LIKE_AN_ERROR.match(text):
        # Kept out of the thread for good: a summary rides in every later window and hand-off.
        reason = "too_long" if len(text) > SUMMARY_REPLY_MAX_CHARS else "error_text"
        log.warning("summary reply discarded; keeping the previous summary", extra={"reason": reason})
        return previous
    if not opening:
        return "\n".join(_head(_lines(text), OPENING_MAX_CHARS))
    room = SUMMARY_MAX_CHARS - len("\n".join(opening)) - len(OPENING_END) - 2
    return _join(opening, _bound(_lines(text), room).splitlines())
