"""The soak: mixed traffic on two `chatbot serve` replicas, every transcript checked against the clients.

Virtual users (two tenants, several users each) run streams and JSON runs, read pages,
drop streams and rejoin them on the other replica, rate answers, read memory, delete
threads, erase themselves, send one message twice at once, and hang up before an answer
then send again. Afterwards every thread's transcript must hold each acknowledged user
message once, in order, with the answers the clients received; deleted and erased
threads must be `404`; no answer may be a `5xx`.

`make test` runs it for 30 s; `make soak` for ten minutes (`CHATBOT_SOAK_SECONDS`),
where the replicas' resident memory must also stay flat over the second half.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.fixtures.app import Replica
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.postgres import TEST_SECRET
from tests.soak.run import run_soak
from tests.soak.traffic import WEIGHTS

SOAK_SECONDS = float(os.environ.get("CHATBOT_SOAK_SECONDS", "30"))
LONG = SOAK_SECONDS >= 300
TENANTS = ("acme", "globex")
# A long soak must not grow by more than this over its second half (the first half warms
# caches, pools and the allocator up); generous, because a leak of a message or a stream
# per run would grow without bound.
MAX_SECOND_HALF_GROWTH = 0.20


# Its own budget: the traffic's duration plus ten minutes for set-up and settling (the
# suite's 600 s per test would end a ten-minute soak before its report).
@pytest.mark.timeout(SOAK_SECONDS + 600)
async def test_soak_loses_and_duplicates_nothing(replicas: Callable[..., Replica], migrated_database_url: str) -> None:
    for tenant in TENANTS:
        await load_demo_kb(migrated_database_url, tenant)
    # A few ms per token makes a run last long enough for double sends to meet and for
    # rejoins to land mid-stream, as with a real model.
    settings = {"CHATBOT_OFFLINE_TOKEN_DELAY_MS": "4"}
    pair = [replicas(**settings), replicas(**settings)]
    result = await run_soak(
        [r.base_url for r in pair],
        {f"replica {i + 1}": r.process.pid for i, r in enumerate(pair)},
        TEST_SECRET,
        migrated_database_url,
        seconds=SOAK_SECONDS,
        tenants=TENANTS,
        users_per_tenant=int(os.environ.get("CHATBOT_SOAK_USERS", "3")),
        rss_period=5.0 if LONG else 1.0,
    )
    print("\n" + result.report())

    assert result.lost == []
    assert result.duplicated == []
    assert result.tally.server_errors == 0, result.tally.table()
    assert result.other == []
    assert set(result.ops) == {*WEIGHTS, "erase user"}, "every kind of operation ran"
    assert result.verdict.user_checked > 0 and result.verdict.answers_checked > 0
    assert result.outcomes["erase user: 200"] > 0
    assert any(kind.startswith("double send: 409") for kind in result.outcomes), "a double send met a run in flight"
    assert result.outcomes["rejoin: answered"] > 0
    assert result.threads_gone > 0
    assert result.remembered_seen > 0, "remember requests were stored, so the memory checks saw facts"
    if LONG:
        for name in result.rss.samples:
            assert result.rss.second_half_growth(name) < MAX_SECOND_HALF_GROWTH, result.rss.table()
