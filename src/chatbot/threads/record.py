"""The run record: resolve a run's ids-only record (db/run_record.py) into what it saw and said.

Where each part is read from (docs/records.md):
- the record itself, the summary, and the channel versions of profile and facts: the run's
  last root checkpoint (`checkpoints`, JSONB; strings are stored inline there);
- profile and facts: `checkpoint_blobs` at those versions;
- the window's messages, the input and the answer: the thread's transcript (every version of
  the `turn` channel, threads/transcript.py);
- the retrieved chunks: `kb_chunks` by (chunk id, version), superseded versions included;
- the system prompt's text: `system_prompts` by its sha256 (the API shows the hash);
- the recalled turns: the thread's indexed turns (`thread_turns`, recall/), by message id,
  each a message of the transcript, with its place and time for the system message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import JsonValue

from chatbot.agent.system_message import SystemCuts, SystemParts, compose_system_text, shorten_question
from chatbot.db.checkpoints import ChannelVersions, Checkpoints, RecordCheckpoint
from chatbot.db.locks import Locks, thread_locked
from chatbot.db.pool import Pool
from chatbot.db.run_record import ChunkVersion, RecordedRun, WindowByIds
from chatbot.ids import RunId, TenantId, ThreadId
from chatbot.recall.service import RecalledTurn, ThreadRecall
from chatbot.responses import (
    ContextMessage,
    MessageRef,
    ModelCallUsage,
    QuotedChunk,
    RecordedAnswer,
    RetrievedChunk,
    RunContext,
    RunRecord,
)
from chatbot.retrieval.versions import read_chunk_versions
from chatbot.threads import queries
from chatbot.turns import message_meta


async def run_in_flight(pool: Pool, locks: Locks, thread_id: ThreadId) -> bool:
    """Tell whether a run holds the thread now, on this replica or any other.

    Reads the lock table rather than trying the lock: a try would make a run starting in
    that instant see the thread busy (409).
    """
    if locks.holds_thread(thread_id):
        return True
    async with pool.connection() as conn:
        return await thread_locked(conn, thread_id)


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
            await queries.remember_prompt(conn, sha256, text)
        self._stored.add(sha256)


async def prompt_text(pool: Pool, sha256: str) -> str | None:
    """Return the text of a system prompt by its sha256, None when unknown."""
    async with pool.connection() as conn:
        return await queries.read_prompt_text(conn, sha256)


@dataclass(frozen=True, slots=True)
class ResolvedRun:
    """A resolved run record: the API body, plus what only the command-line replay shows."""

    body: RunRecord
    settings: dict[str, JsonValue] = field(default_factory=dict)
    shortened: list[str] = field(default_factory=list)
    system_prompt: str | None = None
    """The system prompt's text (from `system_prompts`)."""
    system_message: str | None = None
    """The whole system message the model got, rebuilt from the record's parts."""
    recalled: list[RecalledTurn] = field(default_factory=list)
    """The recalled turns with their place and time (the evaluation gives them again)."""
    chunks: list[QuotedChunk] = field(default_factory=list)
    """The cited chunk versions that still read, with their titles, in rank order (the evaluation gives
    them again); a pruned version is only in the body, its text null."""


@dataclass(frozen=True, slots=True)
class _Snapshot:
    record: RecordedRun | None  # the newest record of this run (full or partial)
    row: RecordCheckpoint  # the checkpoint holding it (or the run's newest)

    @property
    def status(self) -> str | None:
        return None if self.record is None else self.record.status

    @property
    def versions(self) -> ChannelVersions:
        """The checkpoint's channel versions."""
        return self.row.versions


async def _snapshot(pool: Pool, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId) -> _Snapshot | None:
    rows = await Checkpoints(pool).record_checkpoints(thread_id, run_id, tenant_id)
    if not rows:
        return None
    for row in rows:
        record = RecordedRun.parse(row.record)
        # A checkpoint carries the previous run's record until this run writes its own.
        if record is not None and record.run_id == run_id:
            return _Snapshot(record, row)
    return _Snapshot(None, rows[0])


async def _is_newest_run(pool: Pool, thread_id: ThreadId, run_id: RunId) -> bool:
    return await Checkpoints(pool).newest_run(thread_id) == run_id


async def _settled(
    pool: Pool, locks: Locks, snap: _Snapshot, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId
) -> tuple[_Snapshot, str]:
    """Return the run's snapshot and status: its record's, `running`, or `error` (ended without one)."""
    if snap.status is not None:
        return snap, snap.status
    if await _is_newest_run(pool, thread_id, run_id) and await run_in_flight(pool, locks, thread_id):
        return snap, "running"
    # Read again: the run may have ended between the first read and the probe.
    snap = await _snapshot(pool, thread_id, run_id, tenant_id) or snap
    return snap, snap.status or "error"


async def _memory(pool: Pool, thread_id: ThreadId, versions: ChannelVersions) -> tuple[dict[str, JsonValue], list[str]]:
    """Return the profile and facts the run loaded (the checkpoint's versions of those channels)."""
    found = await Checkpoints(pool).memory_values(thread_id, versions)
    profile, facts = found.get("profile"), found.get("facts")
    return (
        dict(profile) if isinstance(profile, dict) else {},
        [str(f) for f in facts] if isinstance(facts, list) else [],
    )


def _window_reach(window: WindowByIds | None) -> set[str]:
    """Return the ids the transcript must be read back to: a span's first, or every listed id."""
    if window is None:
        return set()
    return {window.span[0]} if window.span else set(window.ids)


def _is_input(message: BaseMessage, run_id: RunId) -> bool:
    return isinstance(message, HumanMessage) and message_meta(message).get("run_id") == run_id


async def _transcript_to(
    pool: Pool, thread_id: ThreadId, turn_version: object, wanted: set[str], run_id: RunId
) -> list[BaseMessage]:
    """Return the transcript up to the run (oldest first), back as far as its window reaches.

    The same record threads/transcript.py reads, entered at the run's own version, so a
    record costs what its window holds, not the thread's length (400 turns: ~125 ms read whole).
    """
    seen: dict[str, BaseMessage] = {}
    input_seen = False
    async for message in Checkpoints(pool).messages_newest_first(thread_id, through_version=turn_version):
        seen[str(message.id)] = message
        input_seen = input_seen or _is_input(message, run_id)
        if input_seen and wanted <= seen.keys():
            break
    return list(seen.values())[::-1]


def _run_messages(transcript: list[BaseMessage], run_id: RunId) -> tuple[BaseMessage | None, BaseMessage | None]:
    """Return the run's question and its finished answer, when the transcript holds them."""
    ours = [m for m in transcript if message_meta(m).get("run_id") == run_id]
    question = next((m for m in ours if isinstance(m, HumanMessage)), None)
    answer = next((m for m in ours if isinstance(m, AIMessage)), None)
    return question, answer


def _answer(record: RecordedRun, answer: BaseMessage | None) -> RecordedAnswer | None:
    """Return the answer as the user got it: finished (from the transcript), or the shown part of a failed one."""
    if answer is not None:
        return RecordedAnswer(id=str(answer.id), content=str(answer.text), complete=True)
    if record.shown:
        return RecordedAnswer(id=record.answer_id or "", content=record.shown, complete=False)
    return None


def _public(message: BaseMessage, content: str | None = None) -> ContextMessage:
    role: Literal["user", "assistant"] = "user" if isinstance(message, HumanMessage) else "assistant"
    return ContextMessage(id=str(message.id), role=role, content=str(message.text) if content is None else content)


def _window_ids(record: RecordedRun, transcript: list[BaseMessage]) -> list[str]:
    """Return the ids of the window's messages, expanding a span (agent/record.py) on the transcript."""
    window = record.window
    if window is None or window.span is None:
        return [] if window is None else list(window.ids)
    first, count = window.span
    ids = [str(m.id) for m in transcript]
    if first not in ids:
        return []
    start = ids.index(first)
    kept = ids[start : start + count]
    # The span ends on the run's question: anything else means the transcript disagrees.
    return kept if kept and kept[-1] == record.input_id else []


def _window(record: RecordedRun, transcript: list[BaseMessage]) -> list[ContextMessage]:
    """Return the window's messages as the model got them (the question cut where it was)."""
    by_id = {str(m.id): m for m in transcript}
    ids = _window_ids(record, transcript)
    cut = record.window.question_chars if record.window is not None else None
    messages = []
    for index, message_id in enumerate(ids):
        message = by_id.get(message_id)
        if message is None:  # not expected: the transcript keeps every message
            continue
        if index == len(ids) - 1 and cut is not None:
            messages.append(_public(message, shorten_question(str(message.text), cut)))
        else:
            messages.append(_public(message))
    return messages


async def _retrieved(
    pool: Pool, tenant_id: TenantId, refs: tuple[ChunkVersion, ...]
) -> tuple[list[RetrievedChunk], list[QuotedChunk]]:
    """Return the cited chunk versions in rank order: as the API shows them, and those that still
    read as quoted, with their title (for the system message and the evaluation)."""
    found = await read_chunk_versions(pool, tenant_id, list(refs))
    shown, quoted = [], []
    for chunk_id, version in refs:
        chunk = found.get((chunk_id, version))
        if chunk is None:  # pruned: only if no retained run cited it
            document_id = chunk_id.partition("#")[0]
            shown.append(RetrievedChunk(chunk_id=chunk_id, document_id=document_id, version=version, text=None))
        else:
            shown.append(RetrievedChunk.quoting(chunk))
            quoted.append(chunk)
    return shown, quoted


def _system_message(
    record: RecordedRun,
    prompt: str | None,
    context: RunContext,
    chunks: list[QuotedChunk],
    recalled: list[RecalledTurn],
) -> str | None:
    """Rebuild the system message from the record's parts, as the window composed it (agent/system_message.py).

    The parts are read back by what the record stores: the prompt by its hash, the chunk
    versions, memory and summary from its checkpoint, the recalled turns by id with the
    run's language, and how they were cut (`SystemCuts.from_stored`, which reads records of
    every earlier form).
    """
    cuts = record.window.system_cuts if record.window is not None else None
    if prompt is None or cuts is None or any(c.text is None for c in context.retrieved):
        return None
    if len(recalled) != len(record.recalled):
        return None  # a recalled turn is not indexed any more: the message cannot be rebuilt
    language = str((record.settings or {}).get("language") or "en")
    parts = SystemParts(
        prompt=prompt,
        profile=context.profile,
        facts=context.facts,
        summary=context.summary,
        chunks=chunks,
        recalled=recalled,
        language=language,
    )
    return compose_system_text(parts, SystemCuts.from_stored(cuts))


@dataclass(frozen=True, slots=True)
class _Read:
    """What a run record resolves to before it is shaped into the API body."""

    snap: _Snapshot
    record: RecordedRun  # empty but for the run id when the run wrote none
    status: str
    transcript: list[BaseMessage]
    profile: dict[str, JsonValue]
    facts: list[str]
    retrieved: list[RetrievedChunk]
    chunks: list[QuotedChunk]
    """The retrieved versions that still read, quoted."""
    prompt: str | None
    recalled: list[RecalledTurn]
    """The recalled turns, in the order given."""

    @property
    def complete(self) -> bool:
        """Whether the run ended with a full record (the window and summary are then known)."""
        return self.record.status is not None


def _recalled(turn: RecalledTurn) -> ContextMessage:
    role: Literal["user", "assistant"] = "user" if turn.role == "user" else "assistant"
    return ContextMessage(id=turn.message_id, role=role, content=turn.content)


def _context(read: _Read) -> RunContext:
    return RunContext(
        system_prompt_sha256=read.record.system_prompt_sha256,
        # The summary as given: the same checkpoint's `summary` channel (generate writes both).
        summary=(read.snap.row.summary or "") if read.complete else "",
        profile=read.profile,
        facts=read.facts,
        messages=_window(read.record, read.transcript) if read.complete else [],
        retrieved=read.retrieved,
        recalled=[_recalled(t) for t in read.recalled],
    )


def _body(read: _Read, thread_id: ThreadId) -> RunRecord:
    """Return the API body of a resolved record."""
    record = read.record
    question, answer = _run_messages(read.transcript, record.run_id)
    if question is None:
        # The run's first checkpoint holds its question (agent/state.py `user_turn`), so a run
        # found by its checkpoints always has one: a record without it is not one to answer with.
        raise LookupError(f"run {record.run_id} of thread {thread_id}: its question is not in the transcript")
    return RunRecord(
        run_id=record.run_id,
        thread_id=thread_id,
        status=read.status,
        created_at=message_meta(question).get("created_at") or read.snap.row.ts,
        model=record.model,
        input=MessageRef(id=str(question.id), content=str(question.text)),
        answer=_answer(record, answer),
        citations=list(message_meta(answer).get("citations", [])) if answer is not None else [],
        usage=[ModelCallUsage.model_validate(u) for u in record.usage or ()],
        context=_context(read),
    )


async def read_run_record(
    pool: Pool, locks: Locks, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId
) -> ResolvedRun | None:
    """Return the record of `run_id` on the tenant's thread, or None when there is no such run."""
    snap = await _snapshot(pool, thread_id, run_id, tenant_id)
    if snap is None:
        return None
    snap, status = await _settled(pool, locks, snap, thread_id, run_id, tenant_id)
    record = snap.record or RecordedRun(run_id)
    reach = _window_reach(record.window)
    transcript = await _transcript_to(pool, thread_id, snap.versions.get("turn"), reach, run_id)
    # Profile and facts as loaded, when the run got as far as writing a record.
    profile, facts = await _memory(pool, thread_id, snap.versions) if snap.record is not None else ({}, [])
    retrieved, chunks = await _retrieved(pool, tenant_id, record.retrieved)
    sha = record.system_prompt_sha256
    prompt = await prompt_text(pool, sha) if sha else None
    found = await ThreadRecall(pool).read(thread_id, record.recalled)
    recalled = [found[i] for i in record.recalled if i in found]
    read = _Read(snap, record, status, transcript, profile, facts, retrieved, chunks, prompt, recalled)
    body = _body(read, thread_id)
    return ResolvedRun(
        body,
        dict(record.settings or {}),
        list(record.shortened or ()),
        read.prompt,
        _system_message(record, read.prompt, body.context, read.chunks, read.recalled) if read.complete else None,
        read.recalled,
        read.chunks,
    )
