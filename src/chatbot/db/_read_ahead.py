"""Reads a run's next checkpoint load will ask, sent ahead in a flush that goes out anyway (db/saver.py).

Loading a checkpoint of a graph with a `DeltaChannel` is three reads one after the other:
the checkpoint's row; the walk back to the channel's last snapshot (the first stage:
checkpoint rows, paged); each channel's writes on that walk's chain and its seed blob (the
second stage). Each is a round trip, on every state load of a run (twice before its first
token: the input's update and the graph's load). Here they go out together:

- the walk's first page beside the row (it starts at the row's checkpoint);
- the second stage beside both, as the thread's previous walk foresaw it (`foreseen`): the
  chain of a checkpoint's child is the checkpoint itself, then the checkpoint's own chain,
  unless the checkpoint stored the channel (a snapshot), which then seeds it. Only a run's
  reads send it (a run holds its thread, so the next checkpoint is its own or its previous
  run's child of the walked one);
- after a run's input write, the row, the page and the second stage again, after `COMMIT`
  in the write's own flush (`ReadBack`), for the graph's load that follows.

A walk uses what was read ahead only when it is exactly what it asks: the page only if it
starts at the walk's checkpoint, the second stage only for the very chains and seeds the
walk computed (`SecondStage.answers`). Otherwise it reads its own: a wrong guess costs a
wasted read, never a wrong history.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow, dict_row

from chatbot.db import langgraph_tables
from chatbot.db.locks import Fence
from chatbot.ids import ThreadId

# Reads kept for a walk not asked yet (a read whose history is never asked for leaves one):
# the oldest go first. What is kept is a checkpoint's, which never changes.
KEPT = 64
# Threads whose next second stage is kept (a few KB each: the chain's checkpoint ids). A
# thread's next run finds it while fewer other threads walked since; a miss only reads the
# second stage in a round trip of its own, as before.
FORESEEN_THREADS = 1024
Chains = tuple[tuple[str, tuple[str, ...]], ...]
Seeds = tuple[tuple[str, str], ...]
PageKey = tuple[str, str, str, tuple[str, ...]]
"""(thread, namespace, checkpoint id, delta channels)."""
K = TypeVar("K")
V = TypeVar("V")


def keep(kept: OrderedDict[K, V], key: K, value: V, *, most: int = KEPT) -> None:
    """Keep `value` under `key`, the oldest entries going first past `most`."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > most:
        kept.popitem(last=False)


@dataclass(frozen=True, slots=True)
class SecondStage:
    """A second stage: what it asks (each channel's chain, each seed's version) and, once read, its rows."""

    chains: Chains
    seeds: Seeds
    rows: list[Any] | None = None

    def answers(self, chains: Chains, seeds: Seeds) -> bool:
        """Whether these rows are the ones a walk asking `chains` and `seeds` would read."""
        return self.rows is not None and (self.chains, self.seeds) == (chains, seeds)


def foreseen(
    parent: str,
    channels: Sequence[str],
    snapshots: Sequence[tuple[str | None, bool]],
    chain_by_ch: Mapping[str, list[str]],
    seed_ver_by_ch: Mapping[str, str | None],
) -> SecondStage:
    """Return the second stage a child of `parent` will ask, from `parent`'s own walk.

    The library's walk starts at a checkpoint's parent (`_try_advance_walks`): the child's
    chain is `parent`, then `parent`'s own chain (`chain_by_ch`, seeded by `seed_ver_by_ch`),
    unless `parent` stored the channel's value; `snapshots` is, per channel, its version at
    `parent` and whether `parent` stored it (a blob or an inline value).
    """
    chains: list[tuple[str, tuple[str, ...]]] = []
    seeds: list[tuple[str, str]] = []
    for ch, (version, stored) in zip(channels, snapshots, strict=True):
        chain: tuple[str, ...]
        if stored:
            chain, seed = (parent,), version
        else:
            chain, seed = (parent, *chain_by_ch[ch]), seed_ver_by_ch[ch]
        chains.append((ch, chain))
        if seed is not None:
            seeds.append((ch, seed))
    return SecondStage(tuple(chains), tuple(seeds))


async def send_second_stage(
    cur: AsyncCursor[DictRow], thread: ThreadId, checkpoint_ns: str, chains: Chains, seeds: Seeds
) -> bool:
    """Send a second stage's statement without fetching; False when it asks nothing (nothing sent)."""
    listed = [(ch, list(ids)) for ch, ids in chains]
    return await langgraph_tables.send_delta_writes_and_seeds(
        cur, thread, checkpoint_ns, chains=listed, seeds=list(seeds)
    )


@dataclass
class ReadAhead:
    """What a saver read ahead and has not used yet, each kept until asked for (or pushed out)."""

    first_pages: OrderedDict[PageKey, list[Any]] = field(default_factory=OrderedDict)
    second_stages: OrderedDict[PageKey, SecondStage] = field(default_factory=OrderedDict)
    foreseen: OrderedDict[tuple[str, str, tuple[str, ...]], SecondStage] = field(default_factory=OrderedDict)
    """By (thread, namespace, channels): the second stage of the thread's next checkpoint."""
    read_backs: OrderedDict[tuple[str, str, str], Any] = field(default_factory=OrderedDict)
    """By (fence token, thread, namespace): a run's input checkpoint read back after its commit."""


@dataclass
class CheckpointRead:
    """One checkpoint row's read, with the walk's first page and (`foresee`) its second stage beside it."""

    ahead: ReadAhead
    thread: ThreadId
    checkpoint_ns: str
    checkpoint_id: str | None
    channels: tuple[str, ...]
    page_size: int
    foresee: bool
    _row: AsyncCursor[DictRow] | None = None
    _page: AsyncCursor[DictRow] | None = None
    _second_stage: tuple[SecondStage, AsyncCursor[DictRow]] | None = None

    async def send(self, conn: AsyncConnection[Any], row: AsyncCursor[DictRow] | None = None) -> None:
        """Send the reads in `conn`'s pipeline, without fetching (the row on `row`, if given)."""
        thread, ns = self.thread, self.checkpoint_ns
        if self.channels:
            self._page = conn.cursor(binary=True, row_factory=dict_row)
            await langgraph_tables.send_first_walk_page(
                self._page, thread, ns, self.channels, checkpoint_id=self.checkpoint_id, page=self.page_size
            )
            stage = self.ahead.foreseen.get((thread, ns, self.channels)) if self.foresee else None
            if stage is not None:
                cur = conn.cursor(binary=True, row_factory=dict_row)
                if await send_second_stage(cur, thread, ns, stage.chains, stage.seeds):
                    self._second_stage = (stage, cur)
        self._row = row if row is not None else conn.cursor(binary=True, row_factory=dict_row)
        await langgraph_tables.send_checkpoint_row(self._row, thread, ns, self.checkpoint_id)

    @property
    def sent(self) -> bool:
        """Whether `send` went out (a write that failed before its commit never sends its read-back)."""
        return self._row is not None

    async def fetch(self) -> Any:
        """Return the checkpoint's row (None when absent); keep what was read beside it for its walk.

        Fetched after the pipeline's end: a fetch inside it flushes first, and the pipeline's
        closing `Sync` then costs a round trip of its own.
        """
        assert self._row is not None
        row = await self._row.fetchone()
        page = list(await self._page.fetchall()) if self._page is not None else []
        stage = None
        if self._second_stage is not None:
            foreseen_stage, cur = self._second_stage
            stage = replace(foreseen_stage, rows=list(await cur.fetchall()))
        # Each statement reads its own snapshot: a page that starts elsewhere is dropped.
        if row is not None and page and page[0]["checkpoint_id"] == row["checkpoint_id"]:
            key = (self.thread, self.checkpoint_ns, row["checkpoint_id"], self.channels)
            keep(self.ahead.first_pages, key, page)
            if stage is not None:
                keep(self.ahead.second_stages, key, stage)
        return row


class ReadBack:
    """A run's newest checkpoint (and what its walk asks) read after its input's `COMMIT`, in that write's flush.

    The graph's state load that follows then costs no round trip (the run holds the lock).
    """

    def __init__(self, ahead: ReadAhead, fence: Fence, channels: tuple[str, ...], page_size: int) -> None:
        self.fence = fence
        self.read = CheckpointRead(ahead, ThreadId(fence.thread_id), "", None, channels, page_size, foresee=True)

    async def send(self, conn: AsyncConnection[Any]) -> None:
        """Send the reads after the commit (their results come back with the flush)."""
        await self.read.send(conn)

    async def keep(self) -> None:
        """Keep what came back for the run's next state load."""
        if not self.read.sent:
            return
        row = await self.read.fetch()
        keep(self.read.ahead.read_backs, (self.fence.token, self.fence.thread_id, ""), row)
