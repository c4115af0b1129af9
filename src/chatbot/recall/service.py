"""Thread recall: index a thread's turns as they leave the model window, and find those a question needs.

`ThreadRecall.find` is called by the graph before the model call (agent/_recall.py) with
the thread's recent messages (the `messages` channel, already loaded) and the id of the
oldest message the window kept. It first indexes what the thread said since the last
indexed turn (the recent messages carry it; a thread older than this feature, or one
whose index fell behind the recent list, is indexed from its transcript once), then
searches the turns before the window: BM25 over normalised terms, and with an embeddings
model the nearest turns too, fused by rank. Only messages the checkpoints already hold
are indexed, never the running turn's own question: a failed or cancelled run leaves
nothing in the index that its transcript does not.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from chatbot.db import langgraph_tables
from chatbot.db.checkpoints import decode
from chatbot.db.pool import Pool
from chatbot.ids import ThreadId
from chatbot.recall import queries
from chatbot.recall.terms import terms, tsquery_literal, tsvector_literal

META_KEY = "chatbot"  # the key of the service's own metadata on a persisted message (agent/state.py)
# BM25's usual constants; b below the textbook 0.75: turns are short, and a long answer
# that names the detail once should not lose to a short "ok, the garage" by much.
K1, B = 1.2, 0.5
# The turns scored are those holding one of the query's rarest terms, taken rarest first
# while the turns they name stay under this bound (two terms at least): a term most turns
# hold adds little to a score and would make the search read most of the thread.
CANDIDATE_TURNS = 400
NOVELTY = 1.0  # how much higher a turn that brought new terms ranks (queries.SEARCH_TURNS)
RRF_K = 60  # reciprocal rank fusion of the lexical and the vector lists
_LEXEME = re.compile(r"'([^']+)':")  # a term of a tsvector literal (recall/terms.py)
_BATCH = 32  # transcript versions read at a time when a thread is indexed from its transcript


@dataclass(frozen=True, slots=True)
class RecalledTurn:
    """One earlier message of the thread, as recall gives it to the model and the record names it."""

    message_id: str
    position: int
    """Its place among the thread's user and assistant messages, from 0."""
    role: str
    created_at: datetime | None
    content: str


@dataclass(frozen=True, slots=True)
class RecallHit:
    """A turn the search found, with the turn that answers it or that it answers (when indexed)."""

    turn: RecalledTurn
    neighbours: tuple[RecalledTurn, ...]


class Recaller(Protocol):
    """What the graph asks recall for (`ThreadRecall`, or a recorded run's turns in an evaluation)."""

    @property
    def replays(self) -> bool:
        """True: the turns are a recorded run's, given whatever the window holds (`RecordedRecall`)."""
        ...

    async def find(
        self,
        thread_id: str,
        recent: Sequence[BaseMessage],
        *,
        whole: bool,
        window_first: str | None,
        query: Mapping[str, float],
        question: str,
        hits: int,
    ) -> list[RecallHit]:
        """Return the turns found for the question, best first."""
        ...


@dataclass(frozen=True, slots=True)
class RecordedRecall:
    """A past run's recalled turns, given again as they were (`chatbot eval --from-feedback`)."""

    turns: tuple[RecalledTurn, ...]
    replays: bool = True

    async def find(
        self,
        thread_id: str,
        recent: Sequence[BaseMessage],
        *,
        whole: bool,
        window_first: str | None,
        query: Mapping[str, float],
        question: str,
        hits: int,
    ) -> list[RecallHit]:
        """Return the recorded turns, in the order they were given."""
        return [RecallHit(turn, ()) for turn in self.turns]


def is_conversation_message(message: BaseMessage) -> bool:
    """Whether a message is one the transcript shows: the user's, or an answer this service wrote."""
    if not isinstance(message.additional_kwargs.get(META_KEY), dict):
        return False
    return isinstance(message, HumanMessage) or (isinstance(message, AIMessage) and not message.tool_calls)


def _turn(row: Mapping[str, Any]) -> RecalledTurn:
    return RecalledTurn(
        str(row["message_id"]), int(row["position"]), str(row["role"]), row["created_at"], str(row["content"])
    )


class ThreadRecall:
    """The searchable turns of every thread (`thread_turns`), indexed and searched per thread."""

    replays = False

    def __init__(
        self,
        pool: Pool,
        *,
        embeddings: Embeddings | None = None,
        embeddings_timeout: float = 20.0,
    ) -> None:
        self.pool = pool
        self.embeddings = embeddings
        self.embeddings_timeout = embeddings_timeout

    async def find(
        self,
        thread_id: str,
        recent: Sequence[BaseMessage],
        *,
        whole: bool,
        window_first: str | None,
        query: Mapping[str, float],
        question: str,
        hits: int,
    ) -> list[RecallHit]:
        """Return the best `hits` turns before `window_first` for `query`, best first, each with its neighbours.

        `recent` is the thread's recent messages before the question, oldest first; `whole`
        says whether they are the whole thread. `window_first` is the oldest message the
        window kept (None: it kept none of them, so every earlier message may be recalled).
        """
        async with self.pool.connection() as conn:
            before, indexed = await self._index(conn, thread_id, recent, whole=whole, window_first=window_first)
            if before <= 0 or hits <= 0:
                return []
            # Twice as many as asked: a turn said again word for word counts once (below).
            ranked = await self._rank(conn, thread_id, before, indexed, query, question, hits * 2)
            if not ranked:
                return []
            wanted = sorted({p + d for p in ranked for d in (-1, 0, 1) if 0 <= p + d < before})
            found = {t.position: t for t in map(_turn, await queries.turns_at(conn, thread_id, wanted))}
        out: list[RecallHit] = []
        said: set[str] = set()
        for position in ranked:
            turn = found.get(position)
            if turn is None or _said(turn) in said:
                continue
            said.add(_said(turn))
            out.append(_hit(found, position))
        return out[:hits]

    async def read(self, thread_id: str, message_ids: Sequence[str]) -> dict[str, RecalledTurn]:
        """Return the thread's indexed turns with these ids (a run record's recalled turns), by id."""
        if not message_ids:
            return {}
        async with self.pool.connection() as conn:
            rows = await queries.turns_by_id(conn, thread_id, message_ids)
        return {str(r["message_id"]): _turn(r) for r in rows}

    async def _rank(
        self,
        conn: Any,
        thread_id: str,
        before: int,
        indexed: int,
        query: Mapping[str, float],
        question: str,
        hits: int,
    ) -> list[int]:
        lexical = await self._lexical(conn, thread_id, before, indexed, query, hits)
        vector = await self._nearest(conn, thread_id, before, question, hits)
        if not vector:
            return lexical[:hits]
        fused: dict[int, float] = {}
        for ranking in (lexical, vector):
            for rank, position in enumerate(ranking):
                fused[position] = fused.get(position, 0.0) + 1.0 / (RRF_K + rank + 1)
        return sorted(fused, key=lambda p: (-fused[p], -p))[:hits]

    async def _lexical(
        self, conn: Any, thread_id: str, before: int, indexed: int, query: Mapping[str, float], hits: int
    ) -> list[int]:
        """Return the positions of the best turns by BM25, best first."""
        held = await queries.term_turns(conn, thread_id, list(query)) if query else {}
        if not held:
            return []
        idf = {t: query[t] * math.log(1 + (indexed - n + 0.5) / (n + 0.5)) for t, n in held.items() if n > 0}
        by_rarity = sorted(held, key=lambda t: held[t])
        telling: list[str] = []
        reach = 0
        for term in by_rarity:
            if len(telling) >= 2 and reach + held[term] > CANDIDATE_TURNS:
                break
            telling.append(term)
            reach += held[term]
        params = {
            "thread": thread_id,
            "before": before,
            "query": tsquery_literal(dict.fromkeys(telling, 1.0)),
            "words": list(idf),
            "idfs": list(idf.values()),
            "k1": K1,
            "b": B,
            "novelty": NOVELTY,
            "limit": hits,
        }
        return [position for position, _ in await queries.search_turns(conn, params)]

    async def _nearest(self, conn: Any, thread_id: str, before: int, question: str, limit: int) -> list[int]:
        if self.embeddings is None or not question.strip():
            return []
        async with asyncio.timeout(self.embeddings_timeout):
            vector = await self.embeddings.aembed_query(question)
        params = {"thread": thread_id, "before": before, "dim": len(vector), "vector": _vector(vector), "limit": limit}
        return await queries.nearest_turns(conn, params)

    async def _index(
        self, conn: Any, thread_id: str, recent: Sequence[BaseMessage], *, whole: bool, window_first: str | None
    ) -> tuple[int, int]:
        """Index what is not indexed yet; return the position of `window_first` and how many turns are indexed."""
        messages = [m for m in recent if is_conversation_message(m)]
        newest = await queries.newest_turn(conn, thread_id)
        ids = [str(m.id) for m in messages]
        if newest is not None and newest[1] in ids:
            start = ids.index(newest[1]) + 1
            new, first_position = messages[start:], newest[0] + 1
        elif newest is None and whole:
            new, first_position = messages, 0
        else:
            # Older than the feature, or the index fell behind the recent list: the transcript.
            transcript = await self._transcript(thread_id, stop_at=set(ids[-1:]))
            skip = 0 if newest is None else newest[0] + 1
            new, first_position = transcript[skip:], skip
        await self.add_turns(conn, thread_id, new, first_position)
        # The recent messages are the transcript's tail, now indexed through `end - 1`.
        end = first_position + len(new)
        if window_first is None:
            return end, end
        if window_first in ids:
            return end - len(messages) + ids.index(window_first), end
        position = await queries.position_of(conn, thread_id, window_first)
        return (end if position is None else position), end

    async def add_turns(self, conn: Any, thread_id: str, messages: Sequence[BaseMessage], first: int) -> None:
        """Index `messages` as the thread's turns from position `first`: their rows and their terms' counts."""
        if not messages:
            return
        rows = await _with_novelty(conn, thread_id, await self._rows(thread_id, messages, first))
        await queries.insert_turns(conn, rows)
        await queries.add_terms(conn, thread_id, _term_turns(rows))

    async def _transcript(self, thread_id: str, *, stop_at: set[str]) -> list[BaseMessage]:
        """Return the thread's messages oldest first, through the newest of `stop_at` (the run's history)."""
        seen: dict[str, BaseMessage] = {}
        bound = "a"  # sorts after every version (they start with a digit)
        while True:
            async with self.pool.connection() as conn:
                rows = await langgraph_tables.turn_versions_before(conn, ThreadId(thread_id), bound, _BATCH)
            for row in rows:
                for message in reversed(decode(row["type"], row["blob"]) or []):
                    seen.setdefault(str(message.id), message)  # the newest version of a message wins
            if len(rows) < _BATCH:
                break
            bound = rows[-1]["version"]
        ordered = [m for m in reversed(seen.values()) if is_conversation_message(m)]
        ids = [str(m.id) for m in ordered]
        # Through the run's last history message: the running turn's question is not history.
        last = max((ids.index(i) for i in stop_at if i in ids), default=-1)
        return ordered[: last + 1]

    async def _rows(self, thread_id: str, messages: Sequence[BaseMessage], first: int) -> list[queries.TurnRow]:
        contents = [str(m.text) for m in messages]
        vectors: list[str | None] = [None] * len(messages)
        if self.embeddings is not None and contents:
            async with asyncio.timeout(self.embeddings_timeout):
                vectors = [_vector(v) for v in await self.embeddings.aembed_documents(contents)]
        rows = []
        for offset, (message, content, vector) in enumerate(zip(messages, contents, vectors, strict=True)):
            found = terms(content)
            meta = message.additional_kwargs.get(META_KEY) or {}
            rows.append(
                queries.TurnRow(
                    thread_id=thread_id,
                    position=first + offset,
                    message_id=str(message.id),
                    role="user" if isinstance(message, HumanMessage) else "assistant",
                    created_at=meta.get("created_at") if isinstance(meta.get("created_at"), str) else None,
                    content=content,
                    terms=tsvector_literal(found),
                    length=len(found),
                    novel=0,
                    embedding=vector,
                )
            )
        return rows


def _hit(found: Mapping[int, RecalledTurn], position: int) -> RecallHit:
    """Return the turn at `position` with its partner: the answer after a question, the question before an answer."""
    turn = found[position]
    partner = position + 1 if turn.role == "user" else position - 1
    other = found.get(partner)
    neighbours = (other,) if other is not None and other.role != turn.role else ()
    return RecallHit(turn, neighbours)


async def _with_novelty(conn: Any, thread_id: str, rows: list[queries.TurnRow]) -> list[queries.TurnRow]:
    """Return the rows with how many terms each brought into the thread (none of its turns held them before)."""
    held = await queries.term_turns(conn, thread_id, sorted({t for r in rows for t in _LEXEME.findall(r.terms)}))
    seen = {t for t, n in held.items() if n > 0}
    out = []
    for row in rows:
        found = set(_LEXEME.findall(row.terms))
        out.append(replace(row, novel=len(found - seen)))
        seen |= found
    return out


def _term_turns(rows: Sequence[queries.TurnRow]) -> dict[str, int]:
    """Return how many of the rows hold each term (a term counts once per turn)."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts.update(_LEXEME.findall(row.terms))
    return dict(counts)


def _said(turn: RecalledTurn) -> str:
    """Return what a turn said, as compared for repeats (case and spacing aside)."""
    return f"{turn.role}:{' '.join(turn.content.casefold().split())}"


def _vector(values: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"
