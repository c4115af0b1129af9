"""The isolation matrix's retrieval probes: tenant A's own document stays tenant A's.

Tenant A alone gets a rider no demo document mentions; both tenants get the demo knowledge
base. A's probe must cite the rider (the control that the question reaches it); B's probes,
one of them in words B's own documents share, must neither cite nor retrieve it. Each probe
thread then asks to remember a fact, and the caller's memory is waited for until it settles:
the matrix checks later that nobody changed it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

from chatbot.db.pool import make_pool
from chatbot.ids import TenantId
from chatbot.retrieval.ingest import ingest_paths
from tests.fixtures.knowledge import DEMO_KB
from tests.fixtures.postgres import settings_for
from tests.fixtures.retrieval_kb import write_docs
from tests.fixtures.wait import wait_until
from tests.hardening.isolation_world import JSON, TENANT_A, TENANT_B, Caller, World, marker, memory, message

RIDER_DOC = {
    "zephyrine-rider.md": "# Zephyrine lagoon rider\n\n"
    "The Zephyrine lagoon rider pays 7,431 quetzal credits for kelp damage to moored houseboats, "
    "and 7,431 for flood damage to a parked car.\n"
}
RIDER_FIGURE = "7,431"  # in tenant A's rider only, and in no question: only the rider can bring it
PROBES = (
    "What does the Zephyrine lagoon rider pay for moored houseboats?",
    "How many quetzal credits for kelp damage to houseboats?",
    # Words in B's own vocabulary too: B's search looks them up and scans chunks with them,
    # so what keeps the rider out is the tenant filter on chunks, not a missing word.
    "What is paid for flood damage to a parked car?",
)


async def ingest_knowledge(url: str, tmp_path: Path) -> None:
    """Load the demo knowledge base for both tenants and the rider for tenant A alone."""
    pool = make_pool(url, settings_for(url), name="kb", min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        await ingest_paths(pool, TenantId(TENANT_A), [DEMO_KB / "en", write_docs(tmp_path / "rider", RIDER_DOC)])
        await ingest_paths(pool, TenantId(TENANT_B), [DEMO_KB / "en"])
    finally:
        await pool.close()


async def a_only_chunks(conn: psycopg.AsyncConnection[Any]) -> set[str]:
    """Return the chunk ids tenant A has and tenant B has not (the rider's)."""
    # Chunk ids derive from content: the demo documents have the same ids in both tenants.
    cur = await conn.execute(
        "select chunk_id from kb_chunks where tenant_id = %s "
        "except select chunk_id from kb_chunks where tenant_id = %s",
        (TENANT_A, TENANT_B),
    )
    chunks = {row[0] for row in await cur.fetchall()}
    assert any(c.startswith("zephyrine-rider.md") for c in chunks), chunks
    return chunks


async def probe_and_remember(world: World, k: int, caller: Caller) -> None:
    """Ask about tenant A's rider (A must cite it, B must not see it); then remember a fact."""
    ledger, client = world.ledger, world.clients[k % 2]
    thread = f"iso-probe-{caller.tenant}-{caller.user}-{uuid.uuid4().hex[:8]}"
    world.probe_threads[caller] = thread
    for question in PROBES if caller.tenant == TENANT_B else PROBES[:1]:
        body = message(question)
        response = await client.post(f"/v1/threads/{thread}/runs", json=body, headers=caller.headers(**JSON))
        if not ledger.expect(caller, "probe run", response, 200):
            return
        end = response.json()
        ledger.own(caller, end["run_id"], end["message"]["id"])
        cited = set(end["citations"])
        if caller.tenant == TENANT_A:
            if not cited & world.a_only_chunks:  # the control: the question does reach the rider
                ledger.fail(f"{caller} probe: tenant A's run did not cite its own rider ({sorted(cited)})")
            continue
        if cited & world.a_only_chunks:
            ledger.fail(f"{caller} probe: cites tenant A's chunks {sorted(cited & world.a_only_chunks)}")
        record = await client.get(f"/v1/threads/{thread}/runs/{end['run_id']}", headers=caller.headers())
        if ledger.expect(caller, "probe record", record, 200):
            retrieved = {c["chunk_id"] for c in record.json()["context"]["retrieved"]}
            if retrieved & world.a_only_chunks:
                ledger.fail(f"{caller} probe: retrieved tenant A's chunks {sorted(retrieved & world.a_only_chunks)}")
    fact = marker()
    ledger.own(caller, fact)
    remember = message(f"Please remember that my boat is called {fact}.")
    response = await client.post(f"/v1/threads/{thread}/runs", json=remember, headers=caller.headers(**JSON))
    if ledger.expect(caller, "remember run", response, 200):
        ledger.own(caller, response.json()["run_id"], response.json()["message"]["id"])
    world.memories[caller] = await _settled_memory(client, caller, fact)


async def _settled_memory(client: httpx.AsyncClient, caller: Caller, fact: str) -> dict[str, Any]:
    """Wait until the fact is stored and memory stops changing; return it."""
    reads: list[dict[str, Any]] = []

    async def settled() -> dict[str, Any] | None:
        current = await memory(client, caller)
        previous = reads[-1] if reads else None
        reads.append(current)
        return current if current == previous and any(f["text"].endswith(fact) for f in current["facts"]) else None

    memory_now = await wait_until(
        settled, what=f"{caller}: the remembered fact settled in memory", timeout=20, interval=0.5
    )
    assert memory_now is not None  # wait_until returns only a truthy value
    return memory_now
