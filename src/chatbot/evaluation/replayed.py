"""Cases from rated runs: the question, the window its model saw, and the answer it gave.

Read from the run records (threads/record.py), as `chatbot replay` shows them: the
window's messages (the question last, cut where it was cut), the summary, the profile and
facts as loaded, and the retrieved chunks at the versions the run read, which a later
ingest does not change. The system prompt is today's: a changed prompt is one of the
things an evaluation compares.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from chatbot.db.locks import Locks
from chatbot.db.pool import Pool
from chatbot.evaluation.cases import Case, RecordedWindow, Turn, default_locale
from chatbot.ids import TenantId
from chatbot.responses import QuotedChunk
from chatbot.retrieval.normalize import detect_language
from chatbot.threads.export import rated_runs_of_tenant
from chatbot.threads.record import ResolvedRun, read_run_record

Score = Literal["up", "down"]


async def rated_cases(
    pool: Pool,
    locks: Locks,
    *,
    tenant_id: TenantId,
    since: datetime,
    until: datetime | None = None,
    score: Score | None = None,
) -> list[Case]:
    """Return one case per run of the tenant rated in [since, until), oldest rating first.

    A run whose record is gone (its thread deleted since) is skipped.
    """
    rows = await rated_runs_of_tenant(pool, tenant_id, since, until, score)
    cases = []
    for row in rows:
        record = await read_run_record(pool, locks, row["thread_id"], row["run_id"], tenant_id)
        if record is not None:
            cases.append(_case(record, row["locale"]))
    return cases


def _case(record: ResolvedRun, locale: str | None) -> Case:
    """Return the case of a rated run: `locale` the rating's, else the run's language, else the question's."""
    body = record.body
    asked = body.input
    context = body.context
    messages = list(context.messages)
    # The window ends on the run's question; what comes before it is the history it saw.
    if messages and messages[-1].id == asked.id:
        messages = messages[:-1]
    history = tuple(Turn(m.role, m.content, m.id) for m in messages)
    tokens = record.settings.get("context_tokens")
    window = RecordedWindow(
        summary=context.summary,
        profile=dict(context.profile),
        facts=tuple(context.facts),
        chunks=tuple(_chunk(c) for c in record.chunks),  # a pruned version is not among them
        context_tokens=tokens if isinstance(tokens, int) else None,
        recalled=tuple(record.recalled),
    )
    return Case(
        id=f"{body.thread_id}/{body.run_id}",
        question=asked.content,
        locale=locale or _locale(record, asked.content),
        history=history,
        reference=None if body.answer is None else body.answer.content,
        window=window,
    )


def _locale(record: ResolvedRun, question: str) -> str:
    language = record.settings.get("language")
    return "fa-IR" if language == "fa" else "en-US" if language == "en" else default_locale(question)


def _chunk(cited: QuotedChunk) -> QuotedChunk:
    """Return a cited chunk as the graph takes it back, as if found again."""
    # A chunk version's row has no language; the recorded pages are not given back.
    return cited.model_copy(update={"language": detect_language(cited.text), "pages": None, "score": 1.0})
