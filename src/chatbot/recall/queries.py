"""The recall feature's own SQL: `thread_turns` (the searchable turns of each thread) and `thread_terms`.

Statements as module constants beside the small functions that run them on a connection
the caller passes in (AGENTS.md, "Where SQL lives"). Every statement names one thread_id by
equality: on Citus each is a router statement on the thread's shard (docs/scaling.md).
Deleting a thread's rows is threads/deletion.py's, through the catalogue (every table with
a `thread_id` column), so deletion, retention and erasure take them with the thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from psycopg.rows import DictRow

from chatbot.db.connection_options import Conn
from chatbot.ids import TenantId, ThreadId, UserId

# With its owner: rows another caller's thread left under this thread id are not this index.
NEWEST_TURN = """
select position, message_id, tenant_id, user_id from thread_turns where thread_id = %s order by position desc limit 1
"""
# One row per statement (a multi-row insert is not a router statement under the audit's
# rules); the caller sends them in one pipeline. Conflicts are turns indexed already.
INSERT_TURN = """
insert into thread_turns (thread_id, position, message_id, role, created_at, content, terms, length, novel, embedding,
                          tenant_id, user_id)
values (%s, %s, %s, %s, %s::timestamptz, %s, %s::tsvector, %s, %s, %s::vector, %s, %s)
on conflict do nothing
"""
# The bound of the search: the position of the oldest message the window kept (`first`), or
# `before` when the caller names none. A `first` not indexed yet bounds at `before` too: every
# indexed turn is older than it (the caller checks that none between is missing, else it
# searches again once it has indexed the thread).
_BOUND = """
bound as (
    select case when %(first)s::text is null then %(before)s::int
                else coalesce((select position from thread_turns
                               where thread_id = %(thread)s and message_id = %(first)s), %(before)s::int)
           end as before
)"""
# The hits (`ranked`: position and score) with the turn before and after each, in one
# statement: the caller picks each hit's partner (the question of an answer, the answer of
# a question) from them without another round trip.
# Each wanted turn is read by its key, whatever the planner's statistics.
_WITH_NEIGHBOURS = """
select t.position, t.message_id, t.role, t.created_at, t.content, r.score
from (select distinct h.position + d.step as position
      from ranked h cross join (values (-1), (0), (1)) as d(step)) as w
cross join bound
join thread_turns t on t.thread_id = %(thread)s and t.position = w.position
left join ranked r on r.position = w.position
where w.position < bound.before and w.position >= 0
"""
# BM25 over the turns before the bound that hold one of the query's telling terms. Each
# query term's document frequency is read by key from `thread_terms` (`counts`); its idf
# is weighted by the term's weight in the query (`words`, `weights`); the telling terms are
# the rarest, taken while the turns they name stay under `candidates` (two at least): a
# term most turns hold adds little to a score and would make the search read most of the
# thread. Term frequency comes from the tsvector's positions, the mean length from the
# matched turns. A turn that brought new terms into the thread (a name, a number, a place:
# `novel`) ranks up to `novelty` higher: a late question about a detail is answered by the
# turn that first stated it, not by one of the many that talked around it. Turns of the same
# terms ("ok, thanks", a question asked again) are one hit, the best-scored: repeats would
# fill the limit with one thing said many times.
SEARCH_TURNS = (
    """
with counts as (
    select term, turns from thread_terms
    where thread_id = %(thread)s and term = any(%(words)s::text[]) and turns > 0
),
indexed as (
    select coalesce(max(position), -1) + 1 as turns from thread_turns where thread_id = %(thread)s
),
query as (
    select c.term,
           q.weight * ln(1 + (greatest(indexed.turns, c.turns) - c.turns + 0.5) / (c.turns + 0.5)) as idf,
           row_number() over (order by c.turns, c.term) as rarity,
           sum(c.turns) over (order by c.turns, c.term) as reach
    from counts c
    cross join indexed
    join unnest(%(words)s::text[], %(weights)s::float8[]) as q(term, weight) on q.term = c.term
),"""
    + _BOUND
    + """,
matched as (
    select t.position, t.length, t.novel, t.terms from thread_turns t
    cross join bound
    where t.thread_id = %(thread)s and t.position < bound.before
      and t.terms @@ (select string_agg(quote_literal(term), ' | ')::tsquery from query
                      where rarity <= 2 or reach <= %(candidates)s)
),
mean as materialized (select greatest(coalesce(avg(length), 1), 1)::float8 as mean from matched),
scored as (
    select m.position, m.terms,
           sum(q.idf * tf.n * (%(k1)s + 1) / (tf.n + %(k1)s * (1 - %(b)s + %(b)s * m.length / mean.mean)))
           * (1 + %(novelty)s * least(m.novel, 4) / 4.0) as score
    from matched m
    cross join mean
    cross join lateral unnest(m.terms) as u
    cross join lateral (select coalesce(array_length(u.positions, 1), 1)::float8 as n) as tf
    join query q on q.term = u.lexeme
    group by m.position, m.novel, m.terms
),
ranked as (
    select position, score from (
        select distinct on (terms) position, score from scored order by terms, score desc, position desc
    ) as once
    order by score desc, position desc
    limit %(limit)s
)"""
    + _WITH_NEIGHBOURS
)
# The nearest turns by cosine distance, of the query embedding's dimension (score: the
# negated distance), with their neighbours as SEARCH_TURNS gives them.
NEAREST_TURNS = (
    "with"
    + _BOUND
    + """,
ranked as (
    select t.position, -(t.embedding <=> %(vector)s::vector) as score
    from thread_turns t
    cross join bound
    where t.thread_id = %(thread)s and t.position < bound.before and t.embedding is not null
      and vector_dims(t.embedding) = %(dim)s
    order by t.embedding <=> %(vector)s::vector
    limit %(limit)s
)"""
    + _WITH_NEIGHBOURS
)
# How many turns hold each term: one row per (thread, term), added to as turns are indexed.
ADD_TERM = """
insert into thread_terms (thread_id, term, turns) values (%s, %s, %s)
on conflict (thread_id, term) do update set turns = thread_terms.turns + excluded.turns
"""
TERM_TURNS = "select term, turns from thread_terms where thread_id = %s and term = any(%s::text[])"
TURNS_BY_ID = """
select position, message_id, role, created_at, content from thread_turns
where thread_id = %s and message_id = any(%s::text[])
"""
POSITION_OF = "select position from thread_turns where thread_id = %s and message_id = %s"
# A thread's whole index, before it is built again for the thread's owner (another caller's
# rows under a reused thread id, or an index its transcript no longer holds).
FORGET_TURNS = "delete from thread_turns where thread_id = %s"
FORGET_TERMS = "delete from thread_terms where thread_id = %s"
# Who the thread's index was written for: a thread whose checkpoints are gone is still found
# by its recall rows (deletion, erasure, retention: threads/deletion.py, ops/).
INDEX_OWNER = "select tenant_id, user_id from thread_turns where thread_id = %s limit 1"
INDEXED_FOR = "select distinct thread_id from thread_turns where tenant_id = %s and user_id = %s"
INDEXED_AFTER = "select distinct thread_id from thread_turns where thread_id > %s order by thread_id limit %s"


class SearchParams(TypedDict):
    """SEARCH_TURNS' parameters (NEAREST_TURNS takes them too, with `QueryVector`'s)."""

    thread: ThreadId
    first: str | None
    """The message id of the window's oldest message: the search's bound (None: `before` is)."""
    before: int
    words: list[str]
    weights: list[float]
    candidates: int
    k1: float
    b: float
    novelty: float
    limit: int


class QueryVector(TypedDict):
    """NEAREST_TURNS' own parameters: the question's embedding (pgvector text) and its dimension."""

    vector: str
    dim: int


class IndexedTurn(TypedDict):
    """A row of TURNS_BY_ID: one indexed turn."""

    position: int
    message_id: str
    role: str
    created_at: datetime | None
    content: str


class FoundTurn(IndexedTurn):
    """A row of SEARCH_TURNS or NEAREST_TURNS: a hit with its score, or a hit's neighbour (score None)."""

    score: float | None


@dataclass(frozen=True, slots=True)
class TurnRow:
    """One turn to index, in INSERT_TURN's order."""

    thread_id: ThreadId
    position: int
    message_id: str
    role: str
    created_at: str | None
    content: str
    terms: str
    length: int
    novel: int
    embedding: str | None
    tenant_id: TenantId
    user_id: UserId


@dataclass(frozen=True, slots=True)
class Searched:
    """What one search read: the index's state, the fresh turns' term counts, and the turns found."""

    newest: tuple[int, str] | None
    """The (position, message id) of the thread's newest indexed turn, None when none is."""
    owner: tuple[str, str] | None
    """The (tenant, user) the newest indexed turn was written for, None when none is."""
    first: int | None
    """The position of the window's oldest message, None when it is not indexed (or not named)."""
    held: dict[str, int]
    """How many indexed turns hold each of the terms asked about."""
    lexical: list[FoundTurn]
    """SEARCH_TURNS' rows: the hits (with a score) and their neighbours (score None)."""
    nearest: list[FoundTurn]
    """NEAREST_TURNS' rows likewise (none without a query vector)."""


async def search(
    conn: Conn,
    params: SearchParams,
    *,
    held_terms: Sequence[str],
    vector: QueryVector | None,
) -> Searched:
    """Run a search in one round trip (one pipeline): the index's state, term counts, BM25 and nearest turns.

    `params` are SEARCH_TURNS' (thread, first, before, words, weights, candidates, k1, b,
    novelty, limit); `vector` adds NEAREST_TURNS' own (vector, dim) to them.
    """
    thread, first = params["thread"], params["first"]
    async with conn.pipeline():
        newest = await conn.execute(NEWEST_TURN, (thread,))
        position = await conn.execute(POSITION_OF, (thread, first)) if first is not None else None
        held = await conn.execute(TERM_TURNS, (thread, list(held_terms))) if held_terms else None
        lexical = await conn.execute(SEARCH_TURNS, params) if params["words"] else None
        nearest = await conn.execute(NEAREST_TURNS, {**params, **vector}) if vector is not None else None
    newest_row = await newest.fetchone()
    position_row = await position.fetchone() if position is not None else None
    return Searched(
        newest=None if newest_row is None else (int(newest_row["position"]), str(newest_row["message_id"])),
        owner=None if newest_row is None else (str(newest_row["tenant_id"]), str(newest_row["user_id"])),
        first=None if position_row is None else int(position_row["position"]),
        held={str(r["term"]): int(r["turns"]) for r in await held.fetchall()} if held is not None else {},
        lexical=[_found(r) for r in await lexical.fetchall()] if lexical is not None else [],
        nearest=[_found(r) for r in await nearest.fetchall()] if nearest is not None else [],
    )


def _indexed(row: DictRow) -> IndexedTurn:
    return IndexedTurn(
        position=row["position"],
        message_id=row["message_id"],
        role=row["role"],
        created_at=row["created_at"],
        content=row["content"],
    )


def _found(row: DictRow) -> FoundTurn:
    return FoundTurn(**_indexed(row), score=row["score"])


async def write_turns(conn: Conn, rows: Sequence[TurnRow], counts: Mapping[str, int]) -> None:
    """Index the turns and add to their terms' turn counts (turns indexed already stay).

    Sent in the caller's pipeline and transaction (recall/service.py), with its fence check.
    """
    if not rows:
        return
    thread = rows[0].thread_id
    async with conn.cursor() as cur:
        await cur.executemany(
            INSERT_TURN,
            [
                (
                    r.thread_id,
                    r.position,
                    r.message_id,
                    r.role,
                    r.created_at,
                    r.content,
                    r.terms,
                    r.length,
                    r.novel,
                    r.embedding,
                    r.tenant_id,
                    r.user_id,
                )
                for r in rows
            ],
        )
        if counts:
            await cur.executemany(ADD_TERM, [(thread, term, n) for term, n in counts.items()])


async def term_turns(conn: Conn, thread_id: ThreadId, terms: Sequence[str]) -> dict[str, int]:
    """Return how many of the thread's turns hold each of `terms` (absent: none)."""
    rows = await (await conn.execute(TERM_TURNS, (thread_id, list(terms)))).fetchall()
    return {str(r["term"]): int(r["turns"]) for r in rows}


async def turns_by_id(conn: Conn, thread_id: ThreadId, message_ids: Sequence[str]) -> list[IndexedTurn]:
    """Return the thread's turns with these message ids (in no order)."""
    return [_indexed(r) for r in await (await conn.execute(TURNS_BY_ID, (thread_id, list(message_ids)))).fetchall()]


async def forget_thread(conn: Conn, thread_id: ThreadId) -> None:
    """Delete the thread's whole index: its turns and its terms' counts."""
    await conn.execute(FORGET_TURNS, (thread_id,))
    await conn.execute(FORGET_TERMS, (thread_id,))


async def index_owner(conn: Conn, thread_id: ThreadId) -> tuple[TenantId, UserId] | None:
    """Return the (tenant, user) the thread's index was written for, None without one."""
    row = await (await conn.execute(INDEX_OWNER, (thread_id,))).fetchone()
    return None if row is None else (TenantId(str(row["tenant_id"])), UserId(str(row["user_id"])))


async def indexed_for(conn: Conn, tenant_id: TenantId, user_id: UserId) -> list[ThreadId]:
    """Return the threads holding turns indexed for this tenant and user."""
    return [
        ThreadId(str(r["thread_id"])) for r in await (await conn.execute(INDEXED_FOR, (tenant_id, user_id))).fetchall()
    ]


async def indexed_after(conn: Conn, after: str, limit: int) -> list[ThreadId]:
    """Return up to `limit` indexed threads after `after`, by id."""
    return [ThreadId(str(r["thread_id"])) for r in await (await conn.execute(INDEXED_AFTER, (after, limit))).fetchall()]
