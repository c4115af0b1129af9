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
from typing import Any

from psycopg import AsyncConnection

Conn = AsyncConnection[Any]

NEWEST_TURN = """
select position, message_id from thread_turns where thread_id = %s order by position desc limit 1
"""
# One row per statement (a multi-row insert is not a router statement under the audit's
# rules); the caller sends them in one pipeline. Conflicts are turns indexed already.
INSERT_TURN = """
insert into thread_turns (thread_id, position, message_id, role, created_at, content, terms, length, novel, embedding)
values (%s, %s, %s, %s, %s::timestamptz, %s, %s::tsvector, %s, %s, %s::vector)
on conflict do nothing
"""
# BM25 over the turns before `before` (those that left the window) that hold one of the
# query's telling terms (`query`): term frequency from the tsvector's positions, each
# term's weighted inverse document frequency computed by the caller from `thread_terms`
# (`words`, `idfs`), and the mean length over the same turns. A turn that brought new terms
# into the thread (a name, a number, a place: `novel`) ranks up to `novelty` higher: a late
# question about a detail is answered by the turn that first stated it, not by one of the
# many that talked around it.
SEARCH_TURNS = """
with matched as (
    select position, length, novel, terms from thread_turns
    where thread_id = %(thread)s and position < %(before)s and terms @@ %(query)s::tsquery
),
mean as (select greatest(coalesce(avg(length), 1), 1)::float8 as mean from matched)
select m.position,
       sum(q.idf * tf.n * (%(k1)s + 1) / (tf.n + %(k1)s * (1 - %(b)s + %(b)s * m.length / mean.mean)))
       * (1 + %(novelty)s * least(m.novel, 4) / 4.0) as score
from matched m
cross join mean
cross join lateral unnest(m.terms) as u
cross join lateral (select coalesce(array_length(u.positions, 1), 1)::float8 as n) as tf
join unnest(%(words)s::text[], %(idfs)s::float8[]) as q(lexeme, idf) on q.lexeme = u.lexeme
group by m.position, m.novel
order by score desc, m.position desc
limit %(limit)s
"""
# How many turns hold each term: one row per (thread, term), added to as turns are indexed.
ADD_TERM = """
insert into thread_terms (thread_id, term, turns) values (%s, %s, %s)
on conflict (thread_id, term) do update set turns = thread_terms.turns + excluded.turns
"""
TERM_TURNS = "select term, turns from thread_terms where thread_id = %s and term = any(%s::text[])"
# The nearest turns by cosine distance, of the query embedding's dimension.
NEAREST_TURNS = """
select position from thread_turns
where thread_id = %(thread)s and position < %(before)s and embedding is not null
  and vector_dims(embedding) = %(dim)s
order by embedding <=> %(vector)s::vector
limit %(limit)s
"""
TURNS_AT = """
select position, message_id, role, created_at, content from thread_turns
where thread_id = %s and position = any(%s::int[])
order by position
"""
TURNS_BY_ID = """
select position, message_id, role, created_at, content from thread_turns
where thread_id = %s and message_id = any(%s::text[])
"""
POSITION_OF = "select position from thread_turns where thread_id = %s and message_id = %s"


@dataclass(frozen=True, slots=True)
class TurnRow:
    """One turn to index, in INSERT_TURN's order."""

    thread_id: str
    position: int
    message_id: str
    role: str
    created_at: str | None
    content: str
    terms: str
    length: int
    novel: int
    embedding: str | None


async def newest_turn(conn: Conn, thread_id: str) -> tuple[int, str] | None:
    """Return the (position, message id) of the thread's newest indexed turn, None when none is."""
    row = await (await conn.execute(NEWEST_TURN, (thread_id,))).fetchone()
    return None if row is None else (int(row["position"]), str(row["message_id"]))


async def insert_turns(conn: Conn, rows: Sequence[TurnRow]) -> None:
    """Index the turns (those already indexed are left as they are)."""
    if not rows:
        return
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
                )
                for r in rows
            ],
        )


async def add_terms(conn: Conn, thread_id: str, counts: Mapping[str, int]) -> None:
    """Add to how many turns hold each term (one row per term, in one pipeline)."""
    if not counts:
        return
    async with conn.cursor() as cur:
        await cur.executemany(ADD_TERM, [(thread_id, term, n) for term, n in counts.items()])


async def term_turns(conn: Conn, thread_id: str, terms: Sequence[str]) -> dict[str, int]:
    """Return how many of the thread's turns hold each of `terms` (absent: none)."""
    rows = await (await conn.execute(TERM_TURNS, (thread_id, list(terms)))).fetchall()
    return {str(r["term"]): int(r["turns"]) for r in rows}


async def search_turns(conn: Conn, params: dict[str, Any]) -> list[tuple[int, float]]:
    """Return (position, BM25 score) of the best turns, best first (SEARCH_TURNS' parameters)."""
    rows = await (await conn.execute(SEARCH_TURNS, params)).fetchall()
    return [(int(r["position"]), float(r["score"])) for r in rows]


async def nearest_turns(conn: Conn, params: dict[str, Any]) -> list[int]:
    """Return the positions of the nearest turns by embedding, nearest first."""
    rows = await (await conn.execute(NEAREST_TURNS, params)).fetchall()
    return [int(r["position"]) for r in rows]


async def turns_at(conn: Conn, thread_id: str, positions: Sequence[int]) -> list[dict[str, Any]]:
    """Return the turns at these positions, oldest first."""
    return await (await conn.execute(TURNS_AT, (thread_id, list(positions)))).fetchall()


async def turns_by_id(conn: Conn, thread_id: str, message_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Return the thread's turns with these message ids (in no order)."""
    return await (await conn.execute(TURNS_BY_ID, (thread_id, list(message_ids)))).fetchall()


async def position_of(conn: Conn, thread_id: str, message_id: str) -> int | None:
    """Return the position of one message of the thread, None when it is not indexed."""
    row = await (await conn.execute(POSITION_OF, (thread_id, message_id))).fetchone()
    return None if row is None else int(row["position"])
