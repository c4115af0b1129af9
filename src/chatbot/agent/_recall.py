"""The recall step of `generate`: earlier turns of the thread that left the window, for this question.

Recall runs only when the window left something out (the thread no longer fits it). The
search (recall/service.py) reads the question with the recent turns around it, so a
follow-up finds what it refers to. The turns found go into the system message's last
section within a bounded share of the context budget (`CHATBOT_RECALL_SHARE`), best first
and each with its partner (question or answer) while the budget allows, and the window
keeps that much less of its recent turns: a shorter suffix of the walk it was built from
(`Window.with_recalled`), not a second build. Recall gives way to everything else: it
never cuts the question, chunks or system text the window kept without it; when it would,
the run goes without recall. The section itself is composed with the rest of the system
message (agent/system_message.py), never appended here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage

from chatbot.agent._tokens import TokenCounter
from chatbot.agent._window import Window
from chatbot.agent.system_message import recalled_part
from chatbot.config import Settings
from chatbot.ids import ThreadId
from chatbot.recall.block import recalled_heading, recalled_line
from chatbot.recall.related import related_terms
from chatbot.recall.service import IndexWriter, RecalledTurn, Recaller, RecallHit, RecallQuery
from chatbot.recall.terms import query_weights

# The recent turns read with the question (a follow-up names little of what it is about).
CONTEXT_MESSAGES = 2
CONTEXT_WEIGHT = 0.3
QUERY_TERMS = 32


def question_terms(question: str, recent: Sequence[str]) -> dict[str, float]:
    """Return the search's weighted terms: the question's, related words, and the recent turns' (`query_weights`)."""
    context = list(recent[-CONTEXT_MESSAGES:])
    return query_weights(question, context, context_weight=CONTEXT_WEIGHT, limit=QUERY_TERMS, related=related_terms)


@dataclass(frozen=True, slots=True)
class Recalled:
    """The window with recalled turns in it, and those turns in the order given."""

    window: Window
    turns: tuple[RecalledTurn, ...] = ()

    @property
    def ids(self) -> tuple[str, ...]:
        """The recalled message ids, as the run record names them."""
        return tuple(t.message_id for t in self.turns)


@dataclass(frozen=True, slots=True)
class RecallAsk:
    """What one turn asks recall beside its window: the thread, its recent messages, the question."""

    thread_id: ThreadId
    writer: IndexWriter
    """The thread's owner and the run's fence, which recall's index writes pass."""
    history: Sequence[BaseMessage]
    """The window's history: the recent messages before the question."""
    whole: bool
    """Whether `history` is the whole thread."""
    question: HumanMessage
    language: str
    """The run's language, which the recalled turns' section is written in."""


def window_left_out(window: Window, whole: bool) -> bool:
    """Whether the window left any earlier message of the thread out (else recall has nothing to add)."""
    return window.first_kept > 0 or not whole


@dataclass(frozen=True, slots=True)
class RecallStep:
    """Recall for `generate`, bound to the recaller, the settings that bound its share, and the token counter."""

    recall: Recaller
    settings: Settings
    counter: TokenCounter

    async def into(self, window: Window, ask: RecallAsk) -> Recalled:
        """Return the window with the turns recall found for the question, or as it was when none fit."""
        settings, counter = self.settings, self.counter
        if settings.recall_hits <= 0 or settings.recall_share <= 0:
            return Recalled(window)
        if not self.recall.replays and not window_left_out(window, ask.whole):
            return Recalled(window)
        if window.question_shortened or window.chunks_shortened or window.system_shortened:
            return Recalled(window)  # the budget is spent already: nothing may give way to recall
        kept = window.messages[1:-1]
        first = str(kept[0].id) if kept else None
        query = RecallQuery(
            ask.thread_id,
            ask.writer,
            ask.history,
            whole=ask.whole,
            window_first=first,
            terms=question_terms(str(ask.question.text), [str(m.text) for m in kept]),
            question=str(ask.question.text),
            hits=settings.recall_hits,
        )
        hits = await self.recall.find(query)
        if not hits:
            return Recalled(window)
        core = counter.count_messages([window.messages[0], window.messages[-1]])
        room = min(int(settings.context_tokens * settings.recall_share), settings.context_tokens - core)
        chosen = _within(hits, room, counter, ask.language)
        if not chosen:
            return Recalled(window)
        cost = counter.count_text(recalled_part(chosen, ask.language))
        recalled = window.with_recalled(chosen, ask.language, cost, settings.context_tokens)
        if recalled is None:  # the section would cut what the window kept without it
            return Recalled(window)
        return Recalled(recalled, tuple(chosen))


def _within(hits: Sequence[RecallHit], room: int, counter: TokenCounter, language: str) -> list[RecalledTurn]:
    """Return the turns that fit in `room` tokens: the hits best first, then their partners in the same order.

    Hits come first: a hit is what the question matched, its partner the context around it,
    and a partner that would push out a later hit costs the question more than it gives. A
    partner saying word for word what a turn given already says (a stock reply) is left out.
    """
    spent = counter.count_text("\n\n" + recalled_heading(language)) + 1
    chosen: dict[str, RecalledTurn] = {}
    said: set[str] = set()

    def take(turn: RecalledTurn) -> None:
        nonlocal spent
        text = " ".join(turn.content.casefold().split())
        cost = counter.count_text(recalled_line(turn, language)) + 1
        if turn.message_id not in chosen and text not in said and spent + cost <= room:
            chosen[turn.message_id] = turn
            said.add(text)
            spent += cost

    for hit in hits:
        take(hit.turn)
    for hit in hits:
        if hit.turn.message_id in chosen:
            for neighbour in hit.neighbours:
                take(neighbour)
    return sorted(chosen.values(), key=lambda t: t.position)
