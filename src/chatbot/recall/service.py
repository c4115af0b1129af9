"""Thread recall: index a thread's turns as they leave the model window, and find those a question needs.

`ThreadRecall.find` is called by the graph before the model call (agent/_recall.py) with
the thread's recent messages (the `messages` channel, already loaded) and the id of the
oldest message the window kept. One round trip reads the index's state and searches the
turns before the window (BM25 over normalised terms, and with an embeddings model the
nearest turns too, fused by rank). What the thread said since the last indexed turn (the
recent messages carry it: usually the previous run's question and answer, which the window
holds anyway) is indexed after the answer: the search did not need it, so the run hands
the write over (`IndexWriter.defer`) and its end-of-run steps write it beside the final
checkpoint (agent/nodes.py), off the path to the first token. Only when the search could
not cover the turns before the window (a thread's first run past the window; a thread
older than this feature, or one whose index fell behind the recent list, indexed from its
transcript once) is the index written first, and then searched again. Only messages the
checkpoints already hold are indexed, never the running turn's own question: a failed or
cancelled run leaves nothing in the index that its transcript does not.

The index writes are a write of the run like its checkpoints: they pass the thread's fence
in their own transaction (db/locks.py `fenced_transaction`), before the answer or after it,
so a run that lost its thread lock (and whose thread may have been deleted or given to
another caller since) writes nothing and fails with `LeaseLost`. Each row names the owner
it was indexed for: rows of another owner under the thread id (left by a thread deleted
before this rule), or an index its thread's transcript no longer holds, are not this
thread's index, and are replaced by one built from the thread's own messages.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, HumanMessage

from chatbot.db.locks import Fence, fenced_transaction
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.recall import queries
from chatbot.recall.terms import terms, tsvector_literal
from chatbot.turns import conversation_turns, is_conversation_message, message_meta

# BM25's usual constants; b below the textbook 0.75: turns are short, and a long answer
# that names the detail once should not lose to a short "ok, the garage" by much.
K1, B = 1.2, 0.5
# The turns scored are those holding one of the query's rarest terms, taken rarest first
# while the turns they name stay under this bound (two terms at least): a term most turns
# hold adds little to a score and would make the search read most of the thread.
CANDIDATE_TURNS = 400
NOVELTY = 1.0  # how much higher a turn that brought new terms ranks (queries.SEARCH_TURNS)
RRF_K = 60  # reciprocal rank fusion of the lexical and the vector lists
# The newest recent messages whose terms' counts the search reads beside it: a run usually
# indexes the previous run's question and answer, and their novelty needs those counts.
_FRESH = 4
_NO_BOUND = 2**31 - 1
_TERMS_SLICE = 50  # turns whose terms are found between two yields to the event loop (`_rows`)


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


@dataclass(frozen=True, slots=True)
class IndexWriter:
    """For whom and under which fence a run indexes its thread: the thread's owner, the run's lease."""

    tenant_id: TenantId
    user_id: UserId
    fence: Fence | None
    """The run's thread lease fence, checked by every index write; None writes unchecked (Studio, a bench)."""
    defer: Callable[[PendingIndexWrite], None] | None = field(default=None, compare=False)
    """Where a write the search did not need goes, to be written after the answer (the run's
    end-of-run steps); None writes it before the search returns (Studio, an evaluation, a bench)."""

    @property
    def owner(self) -> tuple[str, str]:
        """The (tenant, user) the index rows are written for."""
        return (self.tenant_id, self.user_id)


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """What a run asks recall: the thread, its recent messages, and the question with its weighted terms."""

    thread_id: ThreadId
    writer: IndexWriter
    recent: Sequence[BaseMessage]
    """The thread's recent messages before the question, oldest first."""
    whole: bool
    """Whether `recent` is the whole thread."""
    window_first: str | None
    """The oldest message the window kept (None: it kept none, so every earlier one may be recalled)."""
    terms: Mapping[str, float]
    """The query's terms and their weights (recall/terms.py, `query_weights`)."""
    question: str
    hits: int


class Recaller(Protocol):
    """What the graph asks recall for (`ThreadRecall`, or a recorded run's turns in an evaluation)."""

    @property
    def replays(self) -> bool:
        """True: the turns are a recorded run's, given whatever the window holds (`RecordedRecall`)."""
        ...

    async def find(self, query: RecallQuery) -> list[RecallHit]:
        """Return the turns found for the question, best first."""
        ...


@dataclass(frozen=True, slots=True)
class RecordedRecall:
    """A past run's recalled turns, given again as they were (`chatbot eval --from-feedback`)."""

    turns: tuple[RecalledTurn, ...]
    replays: bool = True

    async def find(self, query: RecallQuery) -> list[RecallHit]:
        """Return the recorded turns, in the order they were given."""
        return [RecallHit(turn, ()) for turn in self.turns]


def _turn(row: queries.IndexedTurn) -> RecalledTurn:
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

    async def find(self, query: RecallQuery) -> list[RecallHit]:
        """Return the best `hits` turns before `window_first` for the query, best first, each with its partner.

        One round trip reads the index's state and searches it (queries.search); a second
        indexes what the thread said since the last indexed turn (usually the previous
        run's question and answer, which the window holds anyway), handed over to be
        written after the answer when the writer takes it (`IndexWriter.defer`). Only when
        the search could not cover every turn before the window (a thread's first run past
        the window, a thread older than this feature) is it written first and the search run again.
        """
        if query.hits <= 0:
            return []
        messages = [m for m in query.recent if is_conversation_message(m)]
        fresh = messages[-_FRESH:]
        vector = await self._query_vector(query.question)
        params = self._params(query, first=query.window_first, before=_NO_BOUND)
        async with self.pool.connection() as conn:
            held_terms = sorted({t for m in fresh for t in terms(str(m.text))})
            searched = await queries.search(conn, params, held_terms=held_terms, vector=vector)
            indexed, write = await self._index(query, messages, searched)
            covered = _searched_the_window(query, searched, indexed)
            if covered and query.writer.defer is not None:
                if write.messages or write.replace:
                    query.writer.defer(write)  # after the answer: the search did not need it
                return _hits(searched, query.hits)
            await write.write(conn)
            if not covered:
                before = indexed.end if indexed.first is None else indexed.first
                params = self._params(query, first=None, before=before)
                searched = await queries.search(conn, params, held_terms=[], vector=vector)
        return _hits(searched, query.hits)

    def _params(self, query: RecallQuery, *, first: str | None, before: int) -> queries.SearchParams:
        # Twice as many as asked: a turn said again word for word counts once (`_hits`).
        return {
            "thread": query.thread_id,
            "first": first,
            "before": before,
            "words": list(query.terms),
            "weights": list(query.terms.values()),
            "candidates": CANDIDATE_TURNS,
            "k1": K1,
            "b": B,
            "novelty": NOVELTY,
            "limit": query.hits * 2,
        }

    async def read(self, thread_id: ThreadId, message_ids: Sequence[str]) -> dict[str, RecalledTurn]:
        """Return the thread's indexed turns with these ids (a run record's recalled turns), by id."""
        if not message_ids:
            return {}
        async with self.pool.connection() as conn:
            rows = await queries.turns_by_id(conn, thread_id, message_ids)
        return {str(r["message_id"]): _turn(r) for r in rows}

    async def _query_vector(self, question: str) -> queries.QueryVector | None:
        """Return NEAREST_TURNS' own parameters for the question (None without an embeddings model)."""
        if self.embeddings is None or not question.strip():
            return None
        async with asyncio.timeout(self.embeddings_timeout):
            vector = await self.embeddings.aembed_query(question)
        return {"vector": _vector(vector), "dim": len(vector)}

    async def _index(
        self, query: RecallQuery, messages: Sequence[BaseMessage], searched: queries.Searched
    ) -> tuple[_Indexed, PendingIndexWrite]:
        """Return where the window's oldest message is and where the index ends, and the write indexing the rest."""
        ids = [str(m.id) for m in messages]
        # Rows written for another caller are not this thread's index: they are replaced.
        stale = searched.newest is not None and searched.owner != query.writer.owner
        newest = None if stale else searched.newest
        held: Mapping[str, int] | None = {} if newest is None else searched.held
        if newest is not None and newest[1] in ids:
            start = ids.index(newest[1]) + 1
            new, first_position = messages[start:], newest[0] + 1
            if len(new) > _FRESH:
                held = None  # more than the fresh turns whose counts the search read
        elif newest is None and query.whole:
            new, first_position = messages, 0
        else:
            # Older than the feature, or the index fell behind the recent list: the transcript.
            transcript = await self._transcript(query.thread_id, stop_at=set(ids[-1:]))
            if newest is not None and transcript and not _holds(transcript, newest):
                # An index the thread's own messages do not hold: another thread's, under this id.
                newest, stale, held = None, True, {}
            skip = 0 if newest is None else newest[0] + 1
            new, first_position = transcript[skip:], skip
            if newest is not None:
                held = None
        # Without an index of its own the thread's index is built from position 0, and
        # whatever the thread id held goes first, in the same transaction.
        replace = stale or (newest is None and bool(new))
        write = PendingIndexWrite(self, query.thread_id, new, first_position, query.writer, held, replace)
        # The recent messages are the transcript's tail, indexed through `end - 1` once written.
        end = first_position + len(new)
        first = None if newest is None else searched.first
        if first is None and query.window_first in ids:
            first = end - len(messages) + ids.index(query.window_first)
        return _Indexed(first=first, start=first_position, end=end, stale=stale), write

    async def add_turns(
        self,
        conn: Any,
        thread_id: ThreadId,
        messages: Sequence[BaseMessage],
        first: int,
        *,
        writer: IndexWriter,
        held: Mapping[str, int] | None = None,
        replace: bool = False,
    ) -> None:
        """Index `messages` as the thread's turns from position `first`: their rows and their terms' counts.

        `held` is how many turns held each of their terms before (read with the search);
        None reads it here. `replace` deletes the thread's index first (then `first` is 0 and
        `held` empty). The writes are one transaction that passes the writer's fence: after
        the run's lease is lost they raise `LeaseLost` and write nothing.
        """
        if not messages and not replace:
            return
        rows, held_by_row = await self._rows(thread_id, messages, first, writer)
        counts = _term_turns(held_by_row)
        if held is None:
            held = await queries.term_turns(conn, thread_id, sorted(counts))
        rows = await _with_novelty(rows, held_by_row, held)
        async with _index_transaction(conn, writer.fence):
            if replace:
                await queries.forget_thread(conn, thread_id)
            await queries.write_turns(conn, rows, counts)

    async def _transcript(self, thread_id: ThreadId, *, stop_at: set[str]) -> list[BaseMessage]:
        """Return the thread's conversation messages oldest first, through the newest of `stop_at` (its history)."""
        ordered = [m async for m in conversation_turns(self.pool, ThreadId(thread_id))][::-1]
        ids = [str(m.id) for m in ordered]
        # Through the run's last history message: the running turn's question is not history.
        last = max((ids.index(i) for i in stop_at if i in ids), default=-1)
        return ordered[: last + 1]

    async def _rows(
        self, thread_id: ThreadId, messages: Sequence[BaseMessage], first: int, writer: IndexWriter
    ) -> tuple[list[queries.TurnRow], list[frozenset[str]]]:
        """Return the turns' rows and, beside each, the set of terms it holds."""
        contents = [str(m.text) for m in messages]
        vectors: list[str | None] = [None] * len(messages)
        if self.embeddings is not None and contents:
            async with asyncio.timeout(self.embeddings_timeout):
                vectors = [_vector(v) for v in await self.embeddings.aembed_documents(contents)]
        rows = []
        held_by_row = []
        for offset, (message, content, vector) in enumerate(zip(messages, contents, vectors, strict=True)):
            if offset and offset % _TERMS_SLICE == 0:
                # A thread indexed from its transcript is thousands of turns (~75 us each):
                # other runs of the replica are served between slices, not after all of them.
                await asyncio.sleep(0)
            found = terms(content)
            held_by_row.append(frozenset(found))
            meta = message_meta(message)
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
                    tenant_id=writer.tenant_id,
                    user_id=writer.user_id,
                )
            )
        return rows, held_by_row


@dataclass(frozen=True, slots=True)
class PendingIndexWrite:
    """The turns a run indexes: written before its search returns, or handed over to be written after its answer."""

    recall: ThreadRecall
    thread_id: ThreadId
    messages: Sequence[BaseMessage]
    first: int
    """The position of the first of `messages` in the thread."""
    writer: IndexWriter
    held: Mapping[str, int] | None
    """How many turns held each of the messages' terms before (read with the search); None: read when written."""
    replace: bool
    """Whether the thread's index is replaced (what the thread id held was not its own)."""

    async def write(self, conn: Any = None) -> None:
        """Write the turns on `conn` (else a pool connection) through the run's fence: once lost, `LeaseLost`."""
        if conn is None:
            async with self.recall.pool.connection() as pooled:
                return await self.write(pooled)
        await self.recall.add_turns(
            conn, self.thread_id, self.messages, self.first, writer=self.writer, held=self.held, replace=self.replace
        )


@dataclass(frozen=True, slots=True)
class _Indexed:
    first: int | None
    """The position of the window's oldest message (None: not named, or not in the index)."""
    start: int
    """The position of the first turn this call indexed (`end` when it indexed none)."""
    end: int
    """One past the newest indexed turn."""
    stale: bool
    """Whether the first search read rows that were not this thread's index (replaced since)."""


@asynccontextmanager
async def _index_transaction(conn: Any, fence: Fence | None) -> AsyncIterator[None]:
    """One transaction for an index write, in one pipeline: passing the run's fence when it has one."""
    if fence is not None:
        async with fenced_transaction(conn, fence):
            yield
        return
    async with conn.pipeline(), conn.transaction():
        yield


def _holds(transcript: Sequence[BaseMessage], newest: tuple[int, str]) -> bool:
    """Whether the transcript has the index's newest turn (position, message id) at its place."""
    position, message_id = newest
    return position < len(transcript) and str(transcript[position].id) == message_id


def _searched_the_window(query: RecallQuery, searched: queries.Searched, indexed: _Indexed) -> bool:
    """Whether the first search covered every turn before the window (else it runs again, after indexing)."""
    if indexed.stale:
        return False  # what it read is gone
    if query.window_first is None:
        return indexed.start == indexed.end  # every indexed turn may be recalled, the new ones too
    # The new turns are the window's (at or after its oldest message), which the search leaves out anyway.
    # An oldest message not indexed yet bounds the search at every indexed turn, all older than it: the
    # window's past, when that message is the first of the new turns (the index one question and answer behind).
    if searched.first is None:
        return indexed.first == indexed.start
    return indexed.start >= searched.first


def _hits(searched: queries.Searched, hits: int) -> list[RecallHit]:
    """Return the best `hits` turns, each with its partner: lexical alone, or fused with the nearest by rank."""
    found = {int(r["position"]): _turn(r) for r in [*searched.lexical, *searched.nearest]}
    rankings = [_ranking(rows) for rows in (searched.lexical, searched.nearest) if rows]
    if len(rankings) == 1:
        ranked = rankings[0]
    else:
        fused: dict[int, float] = {}
        for ranking in rankings:
            for rank, position in enumerate(ranking):
                fused[position] = fused.get(position, 0.0) + 1.0 / (RRF_K + rank + 1)
        ranked = sorted(fused, key=lambda p: (-fused[p], -p))
    out: list[RecallHit] = []
    said: set[str] = set()
    for position in ranked:
        turn = found[position]
        if _said(turn) in said:
            continue
        said.add(_said(turn))
        out.append(_hit(found, position))
    return out[:hits]


def _ranking(rows: Sequence[queries.FoundTurn]) -> list[int]:
    """Return the positions of the rows that are hits (a score), best first."""
    scored = [(float(r["score"]), int(r["position"])) for r in rows if r["score"] is not None]
    return [position for _, position in sorted(scored, key=lambda x: (-x[0], -x[1]))]


def _hit(found: Mapping[int, RecalledTurn], position: int) -> RecallHit:
    """Return the turn at `position` with its partner: the answer after a question, the question before an answer."""
    turn = found[position]
    partner = position + 1 if turn.role == "user" else position - 1
    other = found.get(partner)
    neighbours = (other,) if other is not None and other.role != turn.role else ()
    return RecallHit(turn, neighbours)


async def _with_novelty(
    rows: list[queries.TurnRow], held_by_row: Sequence[frozenset[str]], held: Mapping[str, int]
) -> list[queries.TurnRow]:
    """Return the rows with how many terms each brought into the thread (none of its turns held them before)."""
    seen = {t for t, n in held.items() if n > 0}
    out = []
    for offset, (row, found) in enumerate(zip(rows, held_by_row, strict=True)):
        if offset and offset % _TERMS_SLICE == 0:
            await asyncio.sleep(0)  # as in `_rows`: thousands of turns, other runs served between slices
        out.append(replace(row, novel=len(found - seen)))
        seen |= found
    return out


def _term_turns(held_by_row: Sequence[frozenset[str]]) -> dict[str, int]:
    """Return how many of the rows hold each term (a term counts once per turn)."""
    counts: Counter[str] = Counter()
    for found in held_by_row:
        counts.update(found)
    return dict(counts)


def _said(turn: RecalledTurn) -> str:
    """Return what a turn said, as compared for repeats (case and spacing aside)."""
    return f"{turn.role}:{' '.join(turn.content.casefold().split())}"


def _vector(values: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"
