"""A run's sequential exchanges with Postgres, counted through a proxy: a network multiplies each.

With Postgres across a network every sequential exchange costs a round trip, so the count
of them before the first token is a latency budget. The proxy (tests/fixtures/pg_proxy.py)
reads the wire protocol and counts exchanges as the network pays them: work pipelined on
one connection or overlapped on several counts once. The first token's moment is when the
model is handed its window (`window_observer`): nothing after it reads Postgres before
the answer streams. A change that adds an exchange to a path fails here with the list of
them by name; bench/round_trips.py prints the same lists and what they cost at 1 and 5 ms.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Sequence

import psycopg
import pytest
from langchain_core.messages import BaseMessage

from chatbot.config import Settings
from tests.fixtures.app import running_app
from tests.fixtures.messages import send_for_events
from tests.fixtures.pg_proxy import Exchange, proxied
from tests.fixtures.wait import wait_until

EN = {"locale": "en-US"}
POOL_MIN_SIZE = Settings.model_fields["pool_min_size"].default
QUESTION = "How do I file a car body claim and which documents do I need?"
FACT = "Please remember I live in Shiraz. How do I file a car body claim?"

# The budgets this tree keeps, by scenario: (earlier turns, exchanges before the first token,
# exchanges of the whole run and of its memory work after it, settings). The memory writer
# starts as the run ends, so the two are counted together: which side of `end` its first
# exchange falls on is a race. So is one more of that total: the run's unlock and the
# writer's user lock overlap when the two keys hash to different lock sessions, and queue on
# one otherwise. The first two scenarios run with the service's default window; the third
# with a small one, so that its earlier turns leave the window (the tests' answers are short:
# no knowledge base) and recall searches them, while the window keeps the previous question
# and answer (recall's index write then waits for the answer: agent/_index_later.py).
BUDGETS: dict[str, tuple[int, int, int, dict[str, int]]] = {
    "new thread": (0, 3, 10, {}),
    "10-turn thread": (10, 3, 10, {}),
    "recall": (14, 4, 11, {"context_tokens": 800}),
}
# The measured run's added round trip: far longer than the CPU work between two statements the
# service overlaps, even on a loaded machine, so they are seen overlapped. The turns before it
# go without delay.
ROUND_TRIP_SECONDS = 0.1
ATTEMPTS = 3


def named(exchanges: Sequence[Exchange]) -> str:
    """Return the exchanges one a line, numbered: what a failure shows."""
    return "\n".join(f"{i}. {e.name[:200]}" for i, e in enumerate(exchanges, 1))


async def memory_jobs_left(database_url: str, thread: str) -> int:
    """Return the thread's memory jobs not done yet (read beside the proxy, not through it)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        row = await (await conn.execute("select count(*) from memory_jobs where thread_id = %s", (thread,))).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("scenario", list(BUDGETS))
async def test_a_run_keeps_its_exchange_budget(isolated_database_url: str, scenario: str) -> None:
    earlier, first_token_budget, run_budget, settings = BUDGETS[scenario]
    handed_window: list[float] = []

    def note_window(_: Sequence[BaseMessage]) -> None:
        handed_window.append(time.monotonic())

    thread = f"rtt-{uuid.uuid4().hex[:12]}"
    report = ""
    async with proxied(isolated_database_url) as proxy:
        assert proxy.exchanges is not None
        overrides = {"window_observer": note_window}
        # The service's default pool floor (the tests' is 1): two reads overlapped need two connections.
        url = proxy.url(isolated_database_url)
        async with running_app(url, agent_overrides=overrides, pool_min_size=POOL_MIN_SIZE, **settings) as client:
            # A run first, on another thread: connections opened, statements prepared.
            await send_for_events(client, f"warm-{thread}", QUESTION, **EN)
            for _ in range(earlier):
                await send_for_events(client, thread, QUESTION, **EN)
            await wait_until(lambda: _done(isolated_database_url, f"warm-{thread}"), what="warm-up job done")
            # The path's length is its fewest exchanges: a loaded machine can stall the process
            # past the delay and split work the service overlaps, never merge what it does not.
            for attempt in range(ATTEMPTS):
                measured = thread if earlier else f"{thread}-{attempt}"
                await wait_until(functools.partial(_done, isolated_database_url, measured), what="earlier jobs done")
                proxy.one_way = ROUND_TRIP_SECONDS / 2
                sent = time.monotonic()
                events = await send_for_events(client, measured, FACT, **EN)
                await wait_until(functools.partial(_done, isolated_database_url, measured), what="its job done")
                remembered = time.monotonic()
                proxy.one_way = 0
                assert events[-1][0] == "end"
                counted = {
                    "before the first token": (proxy.exchanges.between(sent, handed_window[-1]), first_token_budget),
                    "run and memory": (proxy.exchanges.between(sent, remembered), run_budget),
                }
                over = {what: f"{len(found)} > {most}" for what, (found, most) in counted.items() if len(found) > most}
                if not over:
                    return
                report = "\n".join([str(over), *(f"{what}:\n{named(found)}" for what, (found, _) in counted.items())])
    raise AssertionError(f"over budget in each of {ATTEMPTS} runs; the last:\n{report}")


async def _done(database_url: str, thread: str) -> bool:
    return await memory_jobs_left(database_url, thread) == 0
