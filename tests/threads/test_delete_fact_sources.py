"""A thread `DELETE` keeps the user's facts (memory is the user's) but drops their `source` naming it."""

from __future__ import annotations

from tests.fixtures.app import running_app, services_of
from tests.fixtures.tokens import auth
from tests.memory.test_fact_provenance import _facts_when, _run_id
from tests.memory.test_memory_e2e import memory_of, say

EN = {"locale": "en-US"}


async def test_a_deleted_threads_facts_stay_without_a_source_naming_it(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        await say(client, "src-gone", "remember that my car is a Peugeot 206", **EN)
        kept = _run_id(await say(client, "src-kept", "remember that I live in Shiraz", **EN))
        facts = await _facts_when(client, lambda fs: len(fs) == 2, **EN)
        await services_of(client).memory.drain(5)
        deleted = await client.delete("/v1/threads/src-gone", headers=auth(**EN))
        assert deleted.status_code == 204
        after = {f["text"]: f for f in (await memory_of(client, **EN))["facts"]}
        assert set(after) == {f["text"] for f in facts}  # the facts stay
        assert after["my car is a Peugeot 206"]["source"] is None
        assert after["I live in Shiraz"]["source"] == {"thread_id": "src-kept", "run_id": kept}
        async with services_of(client).pool.connection() as conn:
            row = await (
                await conn.execute("select count(*) as n from store where value::text like %s", ("%src-gone%",))
            ).fetchone()
        assert row is not None and row["n"] == 0  # nothing in memory names the deleted thread


async def test_a_deleted_thread_leaves_the_history_and_the_profile_sources_without_its_name(
    isolated_database_url: str,
) -> None:
    async with running_app(isolated_database_url) as client:
        wrote = _run_id(await say(client, "hist-kept", "remember that my car is a Peugeot 206", **EN))
        await say(client, "hist-gone", "remember that my car is a Peugeot 405", **EN)
        await say(client, "hist-gone", "remember that I have two children", **EN)
        await _facts_when(client, lambda fs: len(fs) == 2 and any("405" in f["text"] for f in fs), **EN)
        await services_of(client).memory.drain(5)
        assert (await client.delete("/v1/threads/hist-gone", headers=auth(**EN))).status_code == 204
        full = (await client.get("/v1/users/u1/memory?history=true", headers=auth(**EN))).json()
        async with services_of(client).pool.connection() as conn:
            row = await (
                await conn.execute("select count(*) as n from store where value::text like %s", ("%hist-gone%",))
            ).fetchone()
        assert row is not None and row["n"] == 0  # nothing in memory names the deleted thread
        # The closed version keeps the run that wrote it; what closed it is gone with its thread.
        (closed,) = [v for v in full["history"] if v["valid_until"] is not None]
        assert closed["text"] == "my car is a Peugeot 206"
        assert closed["source"] == {"thread_id": "hist-kept", "run_id": wrote} and closed["closed_by"] is None
        assert all(f["source"] is None for f in full["facts"])
        # The profile entry the fact gave stays, still tied to the fact: forgetting it takes the entry.
        assert full["profile"]["household"] == ["children:2"]
        children = next(f for f in full["facts"] if "children" in f["text"])
        forgotten = await client.delete(f"/v1/users/u1/memory/facts/{children['id']}", headers=auth(**EN))
        assert forgotten.status_code == 204
        assert "household" not in (await memory_of(client, **EN))["profile"]
