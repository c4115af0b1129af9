"""The run record: resolve a run's ids-only record (agent/record.py) into what it saw and said.

Where each part is read from (docs/records.md):
- the record itself, the summary, and the channel versions of profile and facts: the run's
  last root checkpoint (`checkpoints`, JSONB; strings are stored inline there);
- profile and facts: `checkpoint_blobs` at those versions;
- the window's messages, the input and the answer: the thread's transcript (every version of
  the `turn` channel, threads/transcript.py);
- the retrieved chunks: `kb_chunks` by (chunk id, version), superseded versions included;
- the system prompt's text: `system_prompts` by its sha256 (the API shows the hash).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.serde.base import SerializerProtocol

from chatbot.agent.record import decode_record
from chatbot.agent.state import message_meta
from chatbot.agent.system_message import SystemCuts, compose_system_text, shorten_question
from chatbot.db import langgraph_tables
from chatbot.db.locks import THREAD_LOCKED, Locks
from chatbot.db.pool import Pool
from chatbot.retrieval.versions import read_chunk_versions

_REMEMBER_PROMPT = "insert into system_prompts (sha256, text) values (%s, %s) on conflict (sha256) do nothing"
_PROMPT_TEXT = "select text from system_prompts where sha256 = %s"


async def run_in_flight(pool: Pool, locks: Locks, thread_id: str) -> bool:
    """Tell whether a run holds the thread now, on this replica or any other.

    Reads the lock table rather than trying the lock: a try would make a run starting in
    that instant see the thread busy (409).
    """
    if locks.holds_thread(thread_id):
        return True
    async with pool.connection() as conn:
        row = await (await conn.execute(THREAD_LOCKED, {"thread": thread_id})).fetchone()
    return bool(row and row["locked"])


class SystemPromptsTable:
    """Store each system prompt's text once, by its sha256, before a run record names it."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._stored: set[str] = set()  # per process: one insert per prompt and replica

    async def __call__(self, sha256: str, text: str) -> None:
        """Insert the prompt unless this process already did."""
        if sha256 in self._stored:
            return
        async with self.pool.connection() as conn:
            await conn.execute(_REMEMBER_PROMPT, (sha256, text))
        self._stored.add(sha256)


async def prompt_text(pool: Pool, sha256: str) -> str | None:
    """Return the text of a system prompt by its sha256, None when unknown."""
    async with pool.connection() as conn:
        row = await (await conn.execute(_PROMPT_TEXT, (sha256,))).fetchone()
    return None if row is None else str(row["text"])


@dataclass(frozen=True, slots=True)
class ResolvedRun:
    """A resolved run record: the API body, plus what only the command-line replay shows."""

    body: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    shortened: list[str] = field(default_factory=list)
    system_prompt: str | None = None
    """The system prompt's text (from `system_prompts`)."""
    system_message: str | None = None
    """The whole system message the model got, rebuilt from the record's parts."""


@dataclass(frozen=True, slots=True)
class _Snapshot:
    record: dict[str, Any] | None  # the newest record of this run (full or partial)
    row: dict[str, Any]  # the checkpoint holding it (or the run's newest)


async def _snapshot(pool: Pool, thread_id: str, run_id: str, tenant_id: str) -> _Snapshot | None:
    async with pool.connection() as conn:
        rows = await langgraph_tables.run_record_checkpoints(conn, thread_id, run_id, tenant_id)
    if not rows:
        return None
    for row in rows:
        record = decode_record(row["record"])
        # A checkpoint carries the previous run's record until this run writes its own.
        if record is not None and record.get("run_id") == run_id:
            return _Snapshot(record, row)
    return _Snapshot(None, rows[0])


async def _is_newest_run(pool: Pool, thread_id: str, run_id: str) -> bool:
    async with pool.connection() as conn:
        newest = await langgraph_tables.newest_run(conn, thread_id)
    return newest == run_id


async def _memory(
    pool: Pool, serde: SerializerProtocol, thread_id: str, versions: Any
) -> tuple[dict[str, Any], list[str]]:
    """Return the profile and facts the run loaded (the checkpoint's versions of those channels)."""
    versions = versions if isinstance(versions, dict) else {}
    async with pool.connection() as conn:
        rows = await langgraph_tables.memory_blobs(conn, thread_id, versions.get("profile"), versions.get("facts"))
    found = {
        row["channel"]: serde.loads_typed((row["type"], bytes(row["blob"])))
        for row in rows
        if row["blob"] is not None and row["type"] != "empty"
    }
    profile, facts = found.get("profile"), found.get("facts")
    return (
        dict(profile) if isinstance(profile, dict) else {},
        [str(f) for f in facts] if isinstance(facts, list) else [],
    )


async def _transcript_to(
    pool: Pool, serde: SerializerProtocol, thread_id: str, turn_version: object, record: dict[str, Any], run_id: str
) -> list[BaseMessage]:
    """Return the transcript up to the run (oldest first), back as far as its window reaches.

    The same record threads/transcript.py reads, entered at the run's own version, so a
    record costs what its window holds, not the thread's length (400 turns: ~125 ms read whole).
    """
    span = record.get("window_span")
    wanted = {str(span[0])} if isinstance(span, list) and span else {str(i) for i in record.get("window") or []}
    # Versions are "<32-digit counter>.<random>": "~" sorts after every character they use.
    bound = f"{turn_version}~" if isinstance(turn_version, str) else "a"
    seen: dict[str, BaseMessage] = {}
    input_seen = False
    while True:
        async with pool.connection() as conn:
            rows = await langgraph_tables.turn_versions_before(conn, thread_id, bound, 32)
        for row in rows:
            if row["blob"] is None or row["type"] == "empty":
                continue
            for message in reversed(serde.loads_typed((row["type"], bytes(row["blob"]))) or []):
                seen.setdefault(str(message.id), message)  # the newest version of a message wins
                if isinstance(message, HumanMessage) and message_meta(message).get("run_id") == run_id:
                    input_seen = True
        if len(rows) < 32 or (input_seen and wanted <= seen.keys()):
            return list(seen.values())[::-1]
        bound = rows[-1]["version"]


def _answer(record: dict[str, Any], answer: BaseMessage | None) -> dict[str, Any] | None:
    """Return the answer as the user got it: finished (from the transcript), or the shown part of a failed one."""
    if answer is not None:
        return {"id": str(answer.id), "content": str(answer.text), "complete": True}
    shown = record.get("shown")
    if isinstance(shown, str) and shown:
        return {"id": str(record.get("answer_id") or ""), "content": shown, "complete": False}
    return None


def _public(message: BaseMessage, content: str | None = None) -> dict[str, Any]:
    role = "user" if isinstance(message, HumanMessage) else "assistant"
    return {"id": str(message.id), "role": role, "content": str(message.text) if content is None else content}


def _window_ids(record: dict[str, Any], transcript: list[BaseMessage]) -> list[str]:
    """Return the ids of the window's messages, expanding a span (agent/record.py) on the transcript."""
    span = record.get("window_span")
    if not (isinstance(span, list) and len(span) == 2):
        return [str(i) for i in record.get("window") or []]
    ids = [str(m.id) for m in transcript]
    if span[0] not in ids:
        return []
    start = ids.index(span[0])
    window = ids[start : start + int(span[1])]
    # The span ends on the run's question: anything else means the transcript disagrees.
    return window if window and window[-1] == record.get("input_id") else []


def _window(record: dict[str, Any], transcript: list[BaseMessage]) -> list[dict[str, Any]]:
    """Return the window's messages as the model got them (the question cut where it was)."""
    by_id = {str(m.id): m for m in transcript}
    ids = _window_ids(record, transcript)
    messages = []
    for index, message_id in enumerate(ids):
        message = by_id.get(message_id)
        if message is None:  # not expected: the transcript keeps every message
            continue
        cut = record.get("question_chars")
        if index == len(ids) - 1 and isinstance(cut, int):
            messages.append(_public(message, shorten_question(str(message.text), cut)))
        else:
            messages.append(_public(message))
    return messages


async def _retrieved(pool: Pool, tenant_id: str, refs: list[Any]) -> list[dict[str, Any]]:
    """Return the cited chunk versions in rank order, with their title (for the system message)."""
    pairs = [(str(r[0]), int(r[1])) for r in refs if isinstance(r, list) and len(r) == 2]
    rows = await read_chunk_versions(pool, tenant_id, pairs)
    out = []
    for pair in pairs:
        row = rows.get(pair)
        out.append(
            {
                "chunk_id": pair[0],
                "document_id": row["document_id"] if row else pair[0].partition("#")[0],
                "version": pair[1],
                "text": row["text"] if row else None,  # pruned: only if no retained run cited it
                "title": row["title"] if row else "",
            }
        )
    return out


def _system_message(
    record: dict[str, Any], prompt: str | None, context: dict[str, Any], chunks: list[dict[str, Any]]
) -> str | None:
    """Rebuild the system message from the record's parts, as the window built it (agent/system_message.py)."""
    cuts = record.get("system_cuts")
    if prompt is None or not isinstance(cuts, dict) or any(c["text"] is None for c in chunks):
        return None
    return compose_system_text(
        prompt,
        profile=context["profile"],
        facts=context["facts"],
        summary=context["summary"],
        chunks=chunks,
        cuts=SystemCuts(**cuts),
    )


async def read_run_record(
    pool: Pool, serde: SerializerProtocol, locks: Locks, thread_id: str, run_id: str, tenant_id: str
) -> ResolvedRun | None:
    """Return the record of `run_id` on the tenant's thread, or None when there is no such run."""
    snap = await _snapshot(pool, thread_id, run_id, tenant_id)
    if snap is None:
        return None
    status: str
    if snap.record is not None and snap.record.get("status"):
        status = str(snap.record["status"])
    elif await _is_newest_run(pool, thread_id, run_id) and await run_in_flight(pool, locks, thread_id):
        status = "running"
    else:
        # Read again: the run may have ended between the first read and the probe.
        snap = await _snapshot(pool, thread_id, run_id, tenant_id) or snap
        status = str(snap.record["status"]) if snap.record and snap.record.get("status") else "error"
    record = snap.record or {}
    complete = bool(record.get("status"))
    versions = snap.row["versions"] if isinstance(snap.row["versions"], dict) else {}
    messages = await _transcript_to(pool, serde, thread_id, versions.get("turn"), record, run_id)
    ours = [m for m in messages if message_meta(m).get("run_id") == run_id]
    question = next((m for m in ours if isinstance(m, HumanMessage)), None)
    answer = next((m for m in ours if isinstance(m, AIMessage)), None)
    profile, facts = await _memory(pool, serde, thread_id, snap.row["versions"]) if record else ({}, [])
    created = message_meta(question).get("created_at") if question is not None else None
    chunks = await _retrieved(pool, tenant_id, record.get("retrieved") or [])
    sha = record.get("system_prompt_sha256")
    prompt = await prompt_text(pool, str(sha)) if sha else None
    body = {
        "run_id": run_id,
        "thread_id": thread_id,
        "status": status,
        "created_at": created or snap.row["ts"],
        "model": record.get("model"),
        "input": None if question is None else {"id": str(question.id), "content": str(question.text)},
        "answer": _answer(record, answer),
        "citations": list(message_meta(answer).get("citations", [])) if answer is not None else [],
        "usage": list(record.get("usage") or []),
        "context": {
            "system_prompt_sha256": record.get("system_prompt_sha256"),
            # The summary as given: the same checkpoint's `summary` channel (generate writes both).
            "summary": (snap.row["summary"] or "") if complete else "",
            "profile": profile,
            "facts": facts,
            "messages": _window(record, messages) if complete else [],
            "retrieved": [{k: v for k, v in c.items() if k != "title"} for c in chunks],
        },
    }
    return ResolvedRun(
        body,
        dict(record.get("settings") or {}),
        list(record.get("shortened") or []),
        prompt,
        _system_message(record, prompt, body["context"], chunks) if complete else None,
    )
