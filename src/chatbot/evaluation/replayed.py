"""Cases from rated runs: the question, the window its model saw, and the answer it gave.

Read from the run records (threads/record.py), as `chatbot replay` shows them: the
window's messages (the question last, cut where it was cut), the summary, the profile and
facts as loaded, and the retrieved chunks at the versions the run read, which a later
ingest does not change. The system prompt is today's: a changed prompt is one of the
things an evaluation compares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from chatbot.db.locks import Locks
from chatbot.db.pool import Pool
from chatbot.evaluation.cases import Case, RecordedWindow, Turn, default_locale
from chatbot.ids import TenantId
from chatbot.retrieval.normalize import detect_language
from chatbot.retrieval.versions import read_chunk_versions
from chatbot.threads.export import rated_runs_of_tenant
from chatbot.threads.record import ChunkBody, MessageRefBody, ResolvedRun, read_run_record

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

    A run whose record is gone (its thread deleted since) or that has no question is skipped.
    """
    rows = await rated_runs_of_tenant(pool, tenant_id, since, until, score)
    cases = []
    for row in rows:
        record = await read_run_record(pool, locks, row["thread_id"], row["run_id"], tenant_id)
        question = None if record is None else record.body["input"]
        if record is None or question is None:
            continue
        cases.append(await _case(pool, tenant_id, row, record, question))
    return cases


async def _case(pool: Pool, tenant_id: str, row: Mapping[str, Any], record: ResolvedRun, asked: MessageRefBody) -> Case:
    body = record.body
    context = body["context"]
    question = asked["content"]
    messages = list(context["messages"])
    # The window ends on the run's question; what comes before it is the history it saw.
    if messages and messages[-1]["id"] == asked["id"]:
        messages = messages[:-1]
    history = tuple(Turn(m["role"], m["content"], m["id"]) for m in messages)
    answer = body["answer"]
    tokens = record.settings.get("context_tokens")
    window = RecordedWindow(
        summary=str(context["summary"] or ""),
        profile=dict(context["profile"]),
        facts=tuple(context["facts"]),
        chunks=tuple(await _chunks(pool, tenant_id, context["retrieved"])),
        context_tokens=tokens if isinstance(tokens, int) else None,
        recalled=tuple(record.recalled),
    )
    return Case(
        id=f"{row['thread_id']}/{row['run_id']}",
        question=question,
        locale=row["locale"] or _locale(record, question),
        history=history,
        reference=None if answer is None else str(answer["content"]),
        window=window,
    )


def _locale(record: ResolvedRun, question: str) -> str:
    language = record.settings.get("language")
    return "fa-IR" if language == "fa" else "en-US" if language == "en" else default_locale(question)


async def _chunks(pool: Pool, tenant_id: str, retrieved: Sequence[ChunkBody]) -> list[dict[str, Any]]:
    """Return the retrieved chunks as the graph takes them: with the title and language the record leaves out."""
    rows = await read_chunk_versions(pool, tenant_id, [(str(c["chunk_id"]), int(c["version"])) for c in retrieved])
    chunks = []
    for c in retrieved:
        if c["text"] is None:
            continue  # pruned: no retained run cites it any more
        row = rows.get((str(c["chunk_id"]), int(c["version"])))
        chunks.append(
            {
                "chunk_id": str(c["chunk_id"]),
                "document_id": str(c["document_id"]),
                "version": int(c["version"]),
                "title": str(row["title"] or "") if row else "",
                "text": str(c["text"]),
                "language": detect_language(str(c["text"])),  # a chunk version's row has no language
                "score": 1.0,
            }
        )
    return chunks
