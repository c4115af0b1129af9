"""The service's one reader of what LangGraph's saver wrote: typed rows, values decoded here.

The saver (db/saver.py) writes and loads whole checkpoints for the graph. Everything else
the service reads of them goes through this module: the transcript (every version of the
`turn` channel, newest first), a run's checkpoints (rejoins, run records, cancels), a
channel's value at one version, a failed run's `__error__` write. It holds the serializer
the saver writes with (`SERDE`, which `PooledPostgresSaver` is built with), so no caller
decodes a blob or carries a serializer. The statements themselves are db/langgraph_tables.py's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from pydantic import JsonValue

from chatbot.db import langgraph_tables
from chatbot.db.connection_options import Conn
from chatbot.db.pool import Pool
from chatbot.ids import RunId, TenantId, ThreadId

SERDE: SerializerProtocol = maybe_add_typed_methods(AsyncPostgresSaver.serde)
"""The library's default serializer, which every saver of the service writes with."""

TRANSCRIPT_BATCH = 32
"""Versions of `turn` read per statement: the newest page costs the same at turn 1000 as at 10."""
# Versions are "<32-digit counter>.<random>": "a" sorts after every version, and "<v>~" after
# `v` and before the next one (they use digits and a dot only).
_AFTER_EVERY_VERSION = "a"


def decode(type_: str | None, blob: bytes | memoryview | None) -> Any:
    """Return a stored value as the saver wrote it; None for an empty channel or a missing blob."""
    if blob is None or type_ is None or type_ == "empty":
        return None
    return SERDE.loads_typed((type_, bytes(blob)))


ChannelVersions = dict[str, str]
"""A checkpoint's `channel_versions`: each channel's version when it was written."""


def _versions(value: ChannelVersions | None) -> ChannelVersions:
    return value if isinstance(value, dict) else {}


class MemoryValues(TypedDict, total=False):
    """The `profile` and `facts` channels of a checkpoint, those it has a value for."""

    profile: dict[str, JsonValue]
    facts: list[str]


@dataclass(frozen=True, slots=True)
class RunCheckpoint:
    """One checkpoint a run wrote: its id, who wrote it (`source`) and its channel versions."""

    checkpoint_id: str
    source: str | None
    """`input`/`update` for the user's message or a cancel's update, `loop` for the graph's end."""
    versions: ChannelVersions = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RecordCheckpoint:
    """One checkpoint of a run as its record is read: the record and the summary inline, no blob."""

    checkpoint_id: str
    record: str | None
    summary: str | None
    versions: ChannelVersions
    ts: str


@dataclass(frozen=True, slots=True)
class StoredError:
    """A failed run's `__error__` write: the repr of what its graph raised, when it could be read."""

    text: str | None
    """None when the row holds no value (a write cut short)."""

    @property
    def class_name(self) -> str:
        """Return the exception's class name ("" when unreadable), which says why the run failed."""
        return (self.text or "").partition("(")[0].rpartition(".")[2]


class CheckpointReader:
    """The reads of `Checkpoints` on one connection the caller holds (several in a row, or in its transaction)."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    async def run_checkpoints(self, thread_id: ThreadId, run_id: RunId) -> list[RunCheckpoint]:
        """Return the run's checkpoints, oldest first."""
        rows = await langgraph_tables.run_checkpoints(self.conn, thread_id, run_id)
        return [RunCheckpoint(r["checkpoint_id"], r["source"], _versions(r["versions"])) for r in rows]

    async def record_checkpoints(
        self, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId
    ) -> list[RecordCheckpoint]:
        """Return the run's checkpoints on the tenant's thread, newest first, as a run record reads them."""
        rows = await langgraph_tables.run_record_checkpoints(self.conn, thread_id, run_id, tenant_id)
        return [
            RecordCheckpoint(r["checkpoint_id"], r["record"], r["summary"], _versions(r["versions"]), r["ts"])
            for r in rows
        ]

    async def newest_run(self, thread_id: ThreadId) -> str | None:
        """Return the run id of the thread's newest checkpoint, None without one."""
        return await langgraph_tables.newest_run(self.conn, thread_id)

    async def channel_value(self, thread_id: ThreadId, channel: str, version: object) -> Any:
        """Return a channel's value at `version`; None without a version or a stored value."""
        if version is None:
            return None
        row = await langgraph_tables.channel_blob(self.conn, thread_id, channel, version)
        return None if row is None else decode(row["type"], row["blob"])

    async def memory_values(self, thread_id: ThreadId, versions: ChannelVersions) -> MemoryValues:
        """Return the `profile` and `facts` values at a checkpoint's versions (the channels it has)."""
        rows = await langgraph_tables.memory_blobs(self.conn, thread_id, versions.get("profile"), versions.get("facts"))
        found = MemoryValues()
        for row in rows:
            value = decode(row["type"], row["blob"])
            if value is not None and row["channel"] == "profile":
                found["profile"] = value
            elif value is not None and row["channel"] == "facts":
                found["facts"] = value
        return found

    async def error_write(self, thread_id: ThreadId, checkpoint_id: str) -> StoredError | None:
        """Return the `__error__` write saved with a checkpoint; None when the run did not fail."""
        row = await langgraph_tables.error_write(self.conn, thread_id, checkpoint_id)
        if row is None:
            return None
        if row["blob"] is None:
            return StoredError(None)
        text = ""  # a value that cannot be decoded names no known failure
        with contextlib.suppress(Exception):
            text = str(decode(row["type"], row["blob"]))
        return StoredError(text)

    async def turn_versions(
        self, thread_id: ThreadId, before: str, limit: int
    ) -> tuple[list[list[BaseMessage]], str | None]:
        """Return up to `limit` versions of `turn` sorting below `before`, newest first, and the last one read."""
        rows = await langgraph_tables.turn_versions_before(self.conn, thread_id, before, limit)
        values = [list(decode(row["type"], row["blob"]) or []) for row in rows]
        return values, (rows[-1]["version"] if rows else None)


class Checkpoints:
    """Read what the saver wrote, each read on a pool connection of its own (or `reading` for several)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[CheckpointReader]:
        """Hold one connection for several reads."""
        async with self.pool.connection() as conn:
            yield CheckpointReader(conn)

    async def run_checkpoints(self, thread_id: ThreadId, run_id: RunId) -> list[RunCheckpoint]:
        """Return the run's checkpoints, oldest first."""
        async with self.reading() as reader:
            return await reader.run_checkpoints(thread_id, run_id)

    async def record_checkpoints(
        self, thread_id: ThreadId, run_id: RunId, tenant_id: TenantId
    ) -> list[RecordCheckpoint]:
        """Return the run's checkpoints on the tenant's thread, newest first."""
        async with self.reading() as reader:
            return await reader.record_checkpoints(thread_id, run_id, tenant_id)

    async def newest_run(self, thread_id: ThreadId) -> str | None:
        """Return the run id of the thread's newest checkpoint, None without one."""
        async with self.reading() as reader:
            return await reader.newest_run(thread_id)

    async def memory_values(self, thread_id: ThreadId, versions: ChannelVersions) -> MemoryValues:
        """Return the `profile` and `facts` values at a checkpoint's versions."""
        async with self.reading() as reader:
            return await reader.memory_values(thread_id, versions)

    async def messages_newest_first(
        self, thread_id: ThreadId, *, through_version: object = None
    ) -> AsyncIterator[BaseMessage]:
        """Yield the thread's messages newest first, each once.

        Every version of the `turn` channel is a row of its own (agent/state.py). A run
        writes `turn` twice (the user's message, then the message and the answer), so a later
        version restates an earlier one: the newest version of each message wins. From
        `through_version` (a `turn` version) back when given, else from the newest; a batch
        of versions per statement, so a reader that stops early reads no more batches.
        """
        bound = f"{through_version}~" if isinstance(through_version, str) else _AFTER_EVERY_VERSION
        seen: set[str] = set()
        while True:
            async with self.reading() as reader:
                versions, last = await reader.turn_versions(thread_id, bound, TRANSCRIPT_BATCH)
            for messages in versions:
                for message in reversed(messages):
                    if str(message.id) not in seen:
                        seen.add(str(message.id))
                        yield message
            if len(versions) < TRANSCRIPT_BATCH or last is None:
                return
            bound = last
