"""A thread `DELETE` keeps the user's facts (memory is the user's) but drops their `source` naming it."""

from __future__ import annotations

from chatbot.db.langgraph_tables import facts_prefix
from chatbot.ids import TenantId, UserId
from chatbot.memory.items import prefix_of
from chatbot.memory.namespaces import facts_namespace
from tests.fixtures.app import running_app, services_of
from tests.fixtures.tokens import auth
from tests.memory.test_fact_provenance import _facts_when, _run_id
from tests.memory.test_memory_e2e import memory_of, say

EN = {"locale": "en-US"}


def test_the_store_prefix_of_facts_is_the_memory_features_own() -> None:
    assert facts_prefix(TenantId("acme"), UserId("u-1")) == prefix_of(facts_namespace(TenantId("acme"), UserId("u-1")))


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
