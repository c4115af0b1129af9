"""/metrics, as a dashboard reads it: runs by terminal status, model failures by class and status."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.app import running_app
from tests.fixtures.messages import send_for_events
from tests.fixtures.models import ProviderErrorChatModel, ScriptedChatModel

EN = {"locale": "en-US"}


async def _sample(client: httpx.AsyncClient, name: str, **labels: str) -> float:
    """Return the value of one sample of /metrics (0 when it is not exposed yet)."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


async def test_each_run_increments_the_counter_of_its_terminal_status(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        # An empty knowledge base: the offline model asks for details; asking for a person escalates.
        for thread, content, status in [
            ("m-clarify", "How do I renew third-party insurance?", "clarifying"),
            ("m-escalate", "I want to talk to a human agent, please", "escalate"),
        ]:
            before = await _sample(client, "chatbot_runs_total", status=status)
            event, end = (await send_for_events(client, thread, content, **EN))[-1]
            assert (event, end["status"]) == ("end", status)
            assert await _sample(client, "chatbot_runs_total", status=status) == before + 1

    failing = ScriptedChatModel(mode="fail")
    async with running_app(isolated_database_url, agent_overrides={"chat_model": failing}) as client:
        before = await _sample(client, "chatbot_runs_total", status="error")
        event, _ = (await send_for_events(client, "m-error", "How do I renew third-party insurance?", **EN))[-1]
        assert event == "error"
        assert await _sample(client, "chatbot_runs_total", status="error") == before + 1


async def test_model_failures_are_counted_by_provider_class_and_http_status(isolated_database_url: str) -> None:
    throttled = ProviderErrorChatModel(status_code=429)
    async with running_app(isolated_database_url, agent_overrides={"chat_model": throttled}) as client:
        labels = {"error_class": "ProviderHTTPError", "status": "429"}
        before = await _sample(client, "chatbot_model_errors_total", **labels)
        event, problem = (await send_for_events(client, "m-429", "How do I renew third-party insurance?", **EN))[-1]
        # A provider's 429 is a rate limit (503 model_rate_limited), not an outage (docs/api.md).
        assert (event, problem["status"], problem["reason"]) == ("error", 503, "model_rate_limited")
        assert await _sample(client, "chatbot_model_errors_total", **labels) == before + 1
        # A different status is a different series: a revoked key is not a rate limit.
        throttled.status_code = 401
        (await send_for_events(client, "m-401", "How do I renew third-party insurance?", **EN))[-1]
        assert await _sample(client, "chatbot_model_errors_total", **labels) == before + 1
        assert await _sample(client, "chatbot_model_errors_total", error_class="ProviderHTTPError", status="401") >= 1

    # An exception without an HTTP status (a connection error, a bug in a provider package).
    broken = ScriptedChatModel(mode="fail")
    async with running_app(isolated_database_url, agent_overrides={"chat_model": broken}) as client:
        labels = {"error_class": "RuntimeError", "status": "none"}
        before = await _sample(client, "chatbot_model_errors_total", **labels)
        (await send_for_events(client, "m-none", "How do I renew third-party insurance?", **EN))[-1]
        assert await _sample(client, "chatbot_model_errors_total", **labels) == before + 1
