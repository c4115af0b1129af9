"""The recall step of `generate`: earlier turns of the thread that left the window, for this question.

Recall runs only when the window left something out (the thread no longer fits it). The
search (recall/service.py) reads the question with the recent turns around it, so a
follow-up finds what it refers to. The turns found go into the system message's last
section within a bounded share of the context budget (`CHATBOT_RECALL_SHARE`), best first
and each with its partner (question or answer) while the budget allows, and the window is
then rebuilt with that much less room for recent turns. Recall gives way to everything
else: it never cuts the question, chunks or system text the window kept without it; when
it would, the run goes without recall.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from chatbot.agent._tokens import TokenCounter
from chatbot.agent._window import Window
from chatbot.config import Settings
from chatbot.recall.block import recalled_heading, recalled_line, recalled_section
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


def window_left_out(window: Window, whole: bool) -> bool:
    """Whether the window left any earlier message of the thread out (else recall has nothing to add)."""
    return window.first_kept > 0 or not whole


async def recall_into_window(
    recall: Recaller,
    *,
    settings: Settings,
    counter: TokenCounter,
    thread_id: str,
    writer: IndexWriter,
    history: Sequence[BaseMessage],
    whole: bool,
    question: HumanMessage,
    window: Window,
    language: str,
    rebuild: Callable[[int], Window],
) -> Recalled:
    """Return the window with the turns recall found for the question, or as it was when none fit.

    `history` is the window's history (the recent messages before the question), `whole`
    whether it is the whole thread; `rebuild(budget)` builds the window again with less room.
    `writer` is the thread's owner and the run's fence, which recall's index writes pass.
    """
    if settings.recall_hits <= 0 or settings.recall_share <= 0:
        return Recalled(window)
    if not recall.replays and not window_left_out(window, whole):
        return Recalled(window)
    if window.question_shortened or window.chunks_shortened or window.system_shortened:
        return Recalled(window)  # the budget is spent already: nothing may give way to recall
    kept = window.messages[1:-1]
    query = question_terms(str(question.text), [str(m.text) for m in kept])
    first = str(kept[0].id) if kept else None
    hits = await recall.find(
        RecallQuery(
            thread_id,
            writer,
            history,
            whole=whole,
            window_first=first,
            terms=query,
            question=str(question.text),
            hits=settings.recall_hits,
        )
    )
    if not hits:
        return Recalled(window)
    core = counter.count_messages([window.messages[0], window.messages[-1]])
    room = min(int(settings.context_tokens * settings.recall_share), settings.context_tokens - core)
    chosen = _within(hits, room, counter, language)
    if not chosen:
        return Recalled(window)
    section = recalled_section(chosen, language)
    cost = counter.count_text(section)
    # A window its message count bounded (short turns) has the room already: no rebuild.
    rebuilt = window if window.tokens + cost <= settings.context_tokens else rebuild(settings.context_tokens - cost)
    if _gave_way(window, rebuilt):
        return Recalled(window)
    system = SystemMessage(str(rebuilt.messages[0].text) + section)
    messages = [system, *rebuilt.messages[1:]]
    return Recalled(replace(rebuilt, messages=messages, tokens=rebuilt.tokens + cost), tuple(chosen))


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


def _gave_way(before: Window, after: Window) -> bool:
    """Whether the smaller budget cut something the window kept without recall."""
    return (
        (after.question_shortened and not before.question_shortened)
        or (after.chunks_shortened and not before.chunks_shortened)
        or (after.system_shortened and not before.system_shortened)
    )
