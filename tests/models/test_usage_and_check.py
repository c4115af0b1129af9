"""`chatbot usage` (daily totals that outlive threads, with cost) and `chatbot check-model`, against the wire double."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.fixtures.app import free_port, parse_sse, running_app
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.tokens import auth

PRICES = {"openai:gpt-4o-mini": {"input": 0.15, "output": 0.6, "cached_input": 0.075}}


@pytest.fixture
def double() -> Iterator[ProviderDouble]:
    with ProviderDouble() as d:
        yield d


def chatbot(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatbot.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_usage_is_kept_per_tenant_and_day_after_the_thread_is_deleted(
    isolated_database_url: str, double: ProviderDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    double.default = Behaviour(usage=(1000, 200, 400))

    async def converse() -> None:
        settings: dict[str, Any] = {"model": "openai:gpt-4o-mini", "model_base_url": double.openai_base_url}
        async with running_app(isolated_database_url, **settings) as client:
            for tenant in ("acme", "acme", "globex"):
                response = await client.post(
                    f"/v1/threads/u-{tenant}/runs",
                    json={"message": {"content": "What does travel insurance cover?"}},
                    headers=auth(tenant=tenant, locale="en-US"),
                )
                assert parse_sse(response.text)[-1][0] == "end"
            deleted = await client.delete("/v1/threads/u-acme", headers=auth(tenant="acme", locale="en-US"))
            assert deleted.status_code == 204

    asyncio.run(converse())
    today = datetime.now(UTC).date().isoformat()
    env = {"CHATBOT_DATABASE_URL": isolated_database_url, "CHATBOT_MODEL_PRICES": json.dumps(PRICES)}
    done = chatbot("usage", "--since", today, "--format", "json", **env)
    assert done.returncode == 0, done.stderr[-800:]
    report = json.loads(done.stdout)
    rows = {row["key"]: row for row in report["rows"]}
    assert rows["acme"]["input_tokens"] == 2000 and rows["acme"]["output_tokens"] == 400
    assert rows["acme"]["cached_input_tokens"] == 800
    # (2000 - 800) * 0.15 + 800 * 0.075 + 400 * 0.6, per million tokens
    assert rows["acme"]["cost_usd"] == pytest.approx((1200 * 0.15 + 800 * 0.075 + 400 * 0.6) / 1e6)
    assert report["total"]["input_tokens"] == 3000
    by_model = json.loads(chatbot("usage", "--since", today, "--by", "model", "--format", "json", **env).stdout)
    assert [row["key"] for row in by_model["rows"]] == ["openai:gpt-4o-mini"]
    no_prices = chatbot("usage", "--since", today, "--format", "json", CHATBOT_DATABASE_URL=isolated_database_url)
    assert all(row["cost_usd"] is None for row in json.loads(no_prices.stdout)["rows"])
    table = chatbot("usage", "--since", today, **env)
    assert table.returncode == 0 and "acme" in table.stdout and "globex" in table.stdout
    assert chatbot("usage", "--since", "yesterday", **env).returncode == 2
    unknown = chatbot("usage", "--since", today, "--by", "week", **env)
    assert unknown.returncode == 2 and "--by must be tenant, day or model" in unknown.stderr


def test_check_model_says_what_is_wrong_with_each_entry_in_one_line(double: ProviderDouble) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    chain = "openai:gpt-4o-mini,openai:unknown-model,anthropic:claude-haiku-4-5,openai:gpt-4o"
    urls = f"{double.openai_base_url},{double.openai_base_url},{double.anthropic_base_url}/v1,{closed}"
    env = {
        "CHATBOT_MODEL": chain,
        "CHATBOT_MODEL_BASE_URLS": urls,
        "OPENAI_API_KEY": "k",
        "ANTHROPIC_API_KEY": "bad-key",
    }
    done = chatbot("check-model", **env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 1, done.stderr[-800:]
    assert lines[0] == "answer[0] openai:gpt-4o-mini: ok"
    assert lines[1].startswith("answer[1] openai:unknown-model: unknown model")
    assert lines[2].startswith("answer[2] anthropic:claude-haiku-4-5: rejected key")
    assert lines[3].startswith("answer[3] openai:gpt-4o: unreachable")
    healthy = chatbot("check-model", CHATBOT_MODEL="openai:gpt-4o-mini", CHATBOT_MODEL_BASE_URL=double.openai_base_url,
                      OPENAI_API_KEY="k")  # fmt: skip
    assert healthy.returncode == 0 and healthy.stdout.strip() == "answer[0] openai:gpt-4o-mini: ok"
