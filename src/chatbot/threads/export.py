"""Export rated runs for the evaluation dataset: feedback joined with the turn it rates.

The feedback table holds only the rating; the question, the answer, its citations and its
status are read from the thread's transcript in the checkpoints (the record the messages
endpoint reads, not the bounded recent list in graph state), where every user and
assistant message carries its run id.

Cohorts: each record carries the tenant, the locale of the rating token and `user_key`, a
pseudonym of the user (HMAC-SHA256 of tenant and user id under CHATBOT_EXPORT_KEY): the
same user gets the same key in every export made with one key, and the raw id never leaves.
Retention deletes a thread's feedback with the thread, so export before retention runs.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import TypedDict

from langchain_core.messages import BaseMessage

from chatbot.db.pool import Pool
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.threads import queries
from chatbot.threads.transcript import read_messages
from chatbot.timestamps import rfc3339
from chatbot.turns import conversation_role, message_meta


def parse_since(value: str) -> datetime:
    """Return the UTC instant of an ISO date (midnight UTC) or datetime (UTC unless it says otherwise)."""
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO date or datetime: {value!r}") from None
    if moment.tzinfo is None:  # a bare date is its midnight
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def user_key(key: bytes, tenant_id: TenantId, user_id: UserId) -> str:
    """Return the pseudonym of (tenant, user) under `key`: HMAC-SHA256, hex."""
    # The separator cannot occur in ids (the token's id pattern), so no two pairs collide.
    message = f"{tenant_id}\x00{user_id}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


class RatedTurn(TypedDict):
    """What a rated run left in the transcript (null answer and status when it failed)."""

    user_message: str | None
    answer: str | None
    citations: list[str]
    status: str | None


class FeedbackRecord(RatedTurn):
    """One line of the feedback export (docs/api.md)."""

    thread_id: ThreadId
    run_id: RunId
    tenant_id: TenantId
    locale: str | None
    user_key: str | None
    score: str
    comment: str | None
    rated_at: str


def _turn(messages: Sequence[BaseMessage], run_id: RunId) -> RatedTurn:
    """Return the question, answer, citations and status a run left in the transcript."""
    question: str | None = None
    answer: str | None = None
    citations: list[str] = []
    status: str | None = None
    for message in messages:
        meta = message_meta(message)
        if meta.get("run_id") != run_id:
            continue
        role = conversation_role(message)
        if role == "user" and question is None:
            question = str(message.text)
        elif role == "assistant":
            answer = str(message.text)
            citations = [str(c) for c in meta.get("citations", [])]
            status = meta.get("status")
    # A run that failed leaves its question and no answer: answer and status stay null.
    return RatedTurn(user_message=question, answer=answer, citations=citations, status=status)


async def rated_runs_of_tenant(
    pool: Pool, tenant_id: TenantId, since: datetime, until: datetime | None, score: str | None
) -> list[queries.TenantRating]:
    """Return the tenant's ratings in [since, until) (of one score when given), oldest first."""
    async with pool.connection() as conn:
        return await queries.rated_of_tenant(conn, tenant_id, since, until, score)


async def export_feedback(pool: Pool, since: datetime, *, key: bytes | None = None) -> AsyncIterator[FeedbackRecord]:
    """Yield one record per run rated (or re-rated) at or after `since`, grouped by thread.

    `user_key` is the user's pseudonym under `key`, or None without a key.
    """
    async with pool.connection() as conn:
        rows = await queries.rated_since(conn, since)
    thread_id: ThreadId | None = None
    messages: list[BaseMessage] = []
    for row in rows:
        if row["thread_id"] != thread_id:
            thread_id = row["thread_id"]
            messages = await read_messages(pool, thread_id)
        yield FeedbackRecord(
            thread_id=row["thread_id"],
            run_id=row["run_id"],
            tenant_id=row["tenant_id"],
            locale=row["locale"],
            user_key=None if key is None else user_key(key, row["tenant_id"], row["user_id"]),
            score=row["score"],
            comment=row["comment"],
            rated_at=rfc3339(row["updated_at"]),
            **_turn(messages, row["run_id"]),
        )
