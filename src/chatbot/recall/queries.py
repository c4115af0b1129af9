"""The recall feature's own SQL: `thread_turns`, the searchable turns of each thread.

Statements as module constants beside the small functions that run them on a connection
the caller passes in (AGENTS.md, "Where SQL lives"). Every statement names one thread_id by
equality: on Citus each is a router statement on the thread's shard (docs/scaling.md).
Deleting a thread's rows is threads/deletion.py's, through the catalogue (every table with
a `thread_id` column), so deletion, retention and erasure take them with the thread.
"""

from __future__ import annotations

from collections.abc import Sequence
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
insert into thread_turns (thread_id, position, message_id, role, created_at, content, terms, length, embedding)
values (%s, %s, %s, %s, %s::timestamptz, %s, %s::tsvector, %s, %s::vector)
on conflict do nothing
"""
# BM25 over the turns before `before` (those that left the window): term frequency from
# the tsvector's positions, document frequency and the mean length over the same turns,
# and each query term's weight (the question's count more than the recent turns').
SEARCH_TURNS = """
with stats as (
    select count(*)::float8 as n, coalesce(avg(length), 1)::float8 as mean
    from thread_turns where thread_id = %(thread)s and position < %(before)s
),
hits as (
    select t.position, t.length, u.lexeme, coalesce(array_length(u.positions, 1), 1) as tf
    from thread_turns t cross join lateral unnest(t.terms) as u
    where t.thread_id = %(thread)s and t.position < %(before)s and t.terms @@ %(query)s::tsquery
      and u.lexeme = any(%(words)s::text[])
),
df as (select lexeme, count(*)::float8 as df from hits group by lexeme),
weights as (select * from unnest(%(words)s::text[], %(weights)s::float8[]) as w(lexeme, weight))
select h.position,
       sum(w.weight * ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
           * h.tf * (%(k1)s + 1) / (h.tf + %(k1)s * (1 - %(b)s + %(b)s * h.length / greatest(s.mean, 1)))) as score
from hits h join df on df.lexeme = h.lexeme join weights w on w.lexeme = h.lexeme cross join stats s
group by h.position
order by score desc, h.position desc
limit %(limit)s
"""
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
                    r.embedding,
                )
                for r in rows
            ],
        )


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
