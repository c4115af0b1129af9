"""Model calls after the answer over budget are skipped, not failed: the run is answered.

A memory job whose extraction does not fit waits, pending, and lands when the next day's
budget opens; a summary fold that does not fit keeps the summary and folds on a later turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest

from chatbot.budgets.admin import BudgetTarget, report, set_budget
from chatbot.ids import TenantId, UserId
from tests.fixtures.app import running_app, services_of
from tests.fixtures.messages import send_message
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.sse import parse_sse
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

EN = {"locale": "en-US"}
REMEMBER = "Please remember that I live in Yazd."
USER = BudgetTarget(TenantId("acme"), "user", UserId("u1"))


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@asynccontextmanager
async def extracting_app(
    url: str, monkeypatch: pytest.MonkeyPatch, *, usage: tuple[int, int, int] | None = None, **settings: Any
) -> AsyncIterator[tuple[ProviderDouble, httpx.AsyncClient]]:
    """Serve an app on a priced model (the provider double) whose memory extraction finds one fact.

    `usage` is what every call reports (None: as long as its prompt and answer are).
    """
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ProviderDouble() as double:
        double.objects["ExtractedMemory"] = {"facts": [{"text": "I live in Yazd", "category": "residence"}]}
        if usage is not None:
            double.default = Behaviour(usage=usage)
        settings |= {"model": "openai:gpt-4o-mini", "model_base_url": double.openai_base_url}
        async with running_app(url, **settings) as client:
            yield double, client


async def test_a_memory_job_over_budget_waits_and_lands_when_the_next_days_budget_opens(
    isolated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(datetime(2026, 12, 5, 23, 59, 58, tzinfo=UTC))
    async with extracting_app(isolated_database_url, monkeypatch, memory_job_poll_seconds=0.2) as (double, client):
        services = services_of(client)
        services.budgets.clock = clock
        answer_worst = services.budgets.answer_input_bound + services.budgets.output_cap
        await set_budget(services.pool, USER, "day", "tokens", Decimal(answer_worst))
        # The answer fits and spends nearly all of it: the extraction's worst case does not fit.
        double.script(Behaviour(usage=(answer_worst - 100, 50, 0)))
        deferred_before = await _count(client, "memory_writes", "over_budget")
        response = await send_message(client, "memo", REMEMBER, **EN)
        assert parse_sse(response.text)[-1][0] == "end"  # answered all the same
        await wait_until(
            lambda: _more(client, "memory_writes", "over_budget", deferred_before),
            what="the job deferred",
            timeout=10,
        )
        assert await _pending_jobs(services)
        assert await _facts(client) == []
        assert len(double.requests) == 1  # no extraction call was sent
        clock.now = datetime(2026, 12, 6, 0, 0, 1, tzinfo=UTC)  # the next day's budget
        facts = await wait_until(lambda: _facts(client), what="the memory to land", timeout=15)
        assert facts == ["I live in Yazd"]
        assert len(double.requests) == 2
        [row] = await report(services.pool, TenantId("acme"), clock(), user_id=UserId("u1"))
        assert row["reserved"] == 0 and row["spent"] > 0  # the extraction settled in the new day


async def test_a_memory_job_under_a_budget_with_room_lands_right_after_the_answer(
    isolated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatbot.memory.model_extraction import _input_bound

    async with extracting_app(isolated_database_url, monkeypatch, usage=(300, 60, 0)) as (_, client):
        services = services_of(client)
        memory_worst = _input_bound(REMEMBER) + services.budgets.output_cap
        # Room for the answer's spend and the extraction's worst case after it; not for the
        # extraction beside the answer's hold, which is what the job met while the answer
        # was still unsettled.
        await set_budget(services.pool, USER, "day", "tokens", Decimal(memory_worst + 1000))
        deferred_before = await _count(client, "memory_writes", "over_budget")
        response = await send_message(client, "memo", REMEMBER, **EN)
        assert parse_sse(response.text)[-1][0] == "end"
        facts = await wait_until(lambda: _facts(client), what="the memory to land", timeout=15)
        assert facts == ["I live in Yazd"]
        assert await _count(client, "memory_writes", "over_budget") == deferred_before
        [row] = await report(services.pool, TenantId("acme"), datetime.now(UTC), user_id=UserId("u1"))
        assert row["reserved"] == 0 and row["spent"] == 2 * 360


async def test_a_memory_call_is_sent_with_the_output_the_budget_has_left(
    isolated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatbot.memory.model_extraction import _input_bound

    async with extracting_app(isolated_database_url, monkeypatch, usage=(300, 60, 0)) as (double, client):
        services = services_of(client)
        # After the answer (360), room for the extraction's input and 500 of output: not
        # for its whole output cap, which is what it held before.
        limit = 360 + _input_bound(REMEMBER) + 500
        await set_budget(services.pool, USER, "day", "tokens", Decimal(limit))
        response = await send_message(client, "memo", REMEMBER, **EN)
        assert parse_sse(response.text)[-1][0] == "end"
        facts = await wait_until(lambda: _facts(client), what="the memory to land", timeout=15)
        assert facts == ["I live in Yazd"]
        extraction = double.requests[-1]
        assert extraction.schema_name == "ExtractedMemory"
        assert extraction.body["max_completion_tokens"] == 500


async def test_a_summary_fold_over_budget_is_skipped_and_folds_later(
    isolated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ProviderDouble() as double:
        double.default = Behaviour(usage=(10, 5, 0))
        settings: dict[str, Any] = {
            "model": "openai:gpt-4o-mini",
            "model_base_url": double.openai_base_url,
            "context_tokens": 400,
            "agent_overrides": {"context_tokens": 400},
        }
        async with running_app(isolated_database_url, **settings) as client:
            services = services_of(client)
            # Each answer fits (a window of at most 400 tokens, its schema and 128 of output; 15
            # spent a turn); a fold's input (over 1024 with its instructions) beside the answer's
            # early hold never does.
            target = BudgetTarget(TenantId("acme"), "tenant")
            await set_budget(services.pool, target, "day", "tokens", Decimal(1500))
            graph_config: Any = {"configurable": {"thread_id": "long"}}
            skipped_before = await _count(client, "summary_folds", "over_budget")
            for turn in range(1, 16):
                content = f"Turn {turn}: tell me about the waiting period of travel cover please"
                response = await send_message(client, "long", content, **EN)
                assert parse_sse(response.text)[-1][1]["status"] == "answered"
            assert await _count(client, "summary_folds", "over_budget") > skipped_before
            assert (await services.graph.aget_state(graph_config)).values.get("summary", "") == ""
            await set_budget(services.pool, target, "day", "tokens", Decimal(10**9))
            response = await send_message(client, "long", "Turn 16: and for home cover?", **EN)
            assert parse_sse(response.text)[-1][1]["status"] == "answered"
            assert (await services.graph.aget_state(graph_config)).values.get("summary")  # folded now


async def _count(client: Any, metric: str, outcome: str) -> float:
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith(f'chatbot_{metric}_total{{outcome="{outcome}"}}'):
            return float(line.split()[-1])
    return 0.0


async def _more(client: Any, metric: str, outcome: str, before: float) -> bool:
    return await _count(client, metric, outcome) > before


async def _facts(client: Any) -> list[str]:
    memory = (await client.get("/v1/users/u1/memory", headers=auth(**EN))).json()
    return [f["text"] for f in memory["facts"]]


async def _pending_jobs(services: Any) -> bool:
    async with services.pool.connection() as conn:
        cur = await conn.execute("select claimed_until, attempts from memory_jobs where tenant_id = 'acme'")
        rows = await cur.fetchall()
    # Deferred to the budget's reset (about two seconds away), its claim not counted.
    return len(rows) == 1 and rows[0]["attempts"] == 0
