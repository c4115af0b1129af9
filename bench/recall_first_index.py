"""Measure the event loop's longest stall while recall builds the rows of a long thread's first index.

A thread older than recall is indexed from its transcript on its first run that needs recall:
3,000 turns (6,000 user and assistant messages) have their terms found, their tsvector
literals built and their novelty counted, on the replica's event loop. This prints the
longest gap a 1 ms ticker task saw while `ThreadRecall` built those rows (`_rows`, then the
term counts and `_with_novelty`, as `add_turns` does before its write), so other runs of the
replica wait at most that long for it. No database: the rows are built, not written.

    .venv/bin/python -m bench.recall_first_index [--turns 3000] [--repeat 3]

Two shared cores: compare the figures beside each other, not with another machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.recall import service
from chatbot.recall.service import IndexWriter, ThreadRecall

QUESTION = "بررسی پرونده خسارت {n} معمولا چقدر طول می‌کشد؟ من ماشینم را به تعمیرگاه بردم و پلاک ۴۷ط۸۲۱ بود"
ANSWER = "How long does claim {n} take to be reviewed? The other driver was rude and the garage quoted 300 dollars."


def _messages(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for n in range(turns):
        out.append(HumanMessage(content=QUESTION.format(n=n), id=str(uuid.uuid4())))
        out.append(AIMessage(content=ANSWER.format(n=n), id=str(uuid.uuid4())))
    return out


async def _longest_stall(messages: list[BaseMessage]) -> tuple[float, float]:
    """Return (the longest gap the ticker saw, the whole build), in ms."""
    recall = ThreadRecall(None)  # type: ignore[arg-type]  # building rows reads no pool
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)  # not polling: the ticker's pace is what measures the stalls
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)  # not polling: the ticker's first beats, before the work
    started = time.perf_counter()
    rows, held_by_row = await recall._rows(
        ThreadId("bench"), messages, 0, IndexWriter(TenantId("bench"), UserId("bench"), None)
    )
    service._term_turns(held_by_row)
    await service._with_novelty(rows, held_by_row, {})
    took = time.perf_counter() - started
    done.set()
    await ticker
    return max(gaps) * 1000, took * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    messages = _messages(args.turns)
    for _ in range(args.repeat):
        stall, took = asyncio.run(_longest_stall(messages))
        print(f"turns={args.turns} messages={len(messages)} build_ms={took:.0f} longest_loop_stall_ms={stall:.0f}")


if __name__ == "__main__":
    main()
