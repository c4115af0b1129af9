"""Two cancels of one run (a double click, a backend retry, one cancel to each replica).

The first answers `202`, the second `409` (docs/api.md), and the run's cancelled record,
with what the user was shown, is written whichever cancel came first.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest

from chatbot.caller import CallerContext
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.threads._stream import Listener, StreamEvent
from tests.fixtures.app import running_app, services_of
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.tokens import auth
from tests.threads.test_cancel import cancel_url, rest, until_token

CALLER = CallerContext(TenantId("acme"), UserId("u1"), "en-US")
EN = {"locale": "en-US"}


async def check_cancelled(client: httpx.AsyncClient, thread: str, listener: Listener, seen: list[StreamEvent]) -> None:
    seen += await rest(listener)
    assert [e.event for e in seen].count("error") == 1 and seen[-1].data["reason"] == "cancelled"
    shown = "".join(e.piece for e in seen if e.event == "token")
    record = (await client.get(f"/v1/threads/{thread}/runs/{listener.run_id}", headers=auth(**EN))).json()
    assert record["status"] == "cancelled", record
    assert record["answer"] == {"id": record["answer"]["id"], "content": shown, "complete": False}
    replay = await client.get(f"/v1/threads/{thread}/runs/{listener.run_id}/stream", headers=auth(**EN))
    assert '"reason":"cancelled"' in replay.text.replace(" ", "")


@pytest.mark.parametrize("where", ["same", "each"])
async def test_two_cancels_at_once_answer_202_then_409_and_the_record_is_written(
    migrated_database_url: str, where: str
) -> None:
    async with (
        running_app(migrated_database_url, offline_token_delay_ms=30) as a,
        running_app(migrated_database_url) as b,
    ):
        second = a if where == "same" else b
        for turn in range(4):
            thread = f"twice-{where}-{turn}"
            listener = await services_of(a).runs.start(ThreadId(thread), CALLER, "What does travel insurance cover?")
            seen = await until_token(listener)
            answers = await asyncio.gather(
                a.post(cancel_url(thread, listener.run_id), headers=auth(**EN)),
                second.post(cancel_url(thread, listener.run_id), headers=auth(**EN)),
            )
            assert sorted(r.status_code for r in answers) == [202, 409], [r.text for r in answers]
            await check_cancelled(a, thread, listener, seen)
            # And a third, after the end, changes nothing either.
            late = await b.post(cancel_url(thread, listener.run_id), headers=auth(**EN))
            assert late.status_code == 409


async def test_a_cancelled_record_refused_once_is_written_on_a_retry(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(migrated_database_url, offline_token_delay_ms=30) as client:
        runs = services_of(client).runs
        graph = runs.graph
        real = graph.aupdate_state
        refused: list[str] = []

        # The database blinks at the record's write: a connection dropped once.
        async def blinking(config: Any, values: Any, as_node: Any = None, **kw: Any) -> Any:
            if as_node == "generate" and not refused:
                refused.append(as_node)
                raise psycopg.OperationalError("the server closed the connection")
            return await real(config, values, as_node=as_node, **kw)

        monkeypatch.setattr(graph, "aupdate_state", blinking)
        listener = await runs.start(ThreadId("twice-retry"), CALLER, "What does travel insurance cover?")
        seen = await until_token(listener)
        assert (await client.post(cancel_url("twice-retry", listener.run_id), headers=auth(**EN))).status_code == 202
        await check_cancelled(client, "twice-retry", listener, seen)
        assert refused == ["generate"]


async def test_a_cancelled_runs_model_call_is_in_its_record_and_the_daily_totals(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    tenant = CallerContext(TenantId("cut-usage"), UserId("u1"), "en-US")
    with ProviderDouble() as double:
        double.default = Behaviour(answer="x" * 2000, piece_delay=0.02)
        async with running_app(
            migrated_database_url, model="openai:gpt-4o-mini", model_base_url=double.openai_base_url
        ) as client:
            headers = auth(tenant="cut-usage", **EN)
            listener = await services_of(client).runs.start(
                ThreadId("cut-usage"), tenant, "What does travel insurance cover?"
            )
            seen = await until_token(listener)
            while sum(e.event == "token" for e in seen) < 5:
                seen.append(await asyncio.wait_for(listener.queue.get(), 10))
            assert (await client.post(cancel_url("cut-usage", listener.run_id), headers=headers)).status_code == 202
            assert (await rest(listener))[-1].data["reason"] == "cancelled"
            record = (await client.get(f"/v1/threads/cut-usage/runs/{listener.run_id}", headers=headers)).json()
            (call,) = record["usage"]
            assert call["kind"] == "answer" and call["model"] == "openai:gpt-4o-mini"
            assert call["input_tokens"] > 0 and call["output_tokens"] > 0
            async with services_of(client).pool.connection() as conn:
                row = await (
                    await conn.execute(
                        "select calls, input_tokens, output_tokens from model_usage_daily where tenant_id = %s",
                        ("cut-usage",),
                    )
                ).fetchone()
    assert row is not None
    assert (row["calls"], row["input_tokens"], row["output_tokens"]) == (
        1,
        call["input_tokens"],
        call["output_tokens"],
    )
