"""`chatbot eval` is not counted against a tenant's budgets unless `--charge-tenant` asks for it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chatbot.agent.modelcall import answer_input_bound
from chatbot.budgets.admin import BudgetTarget, report, set_budget
from chatbot.cli.main import app as cli
from chatbot.config import Settings
from chatbot.db.pool import open_pool
from chatbot.ids import TenantId
from tests.fixtures.postgres import settings_for
from tests.fixtures.provider_double import Behaviour, ProviderDouble

MODEL = "openai:gpt-4o-mini"
QUESTIONS = ["What does travel insurance cover?", "Is hail damage covered?", "How do I file a claim?"]


async def _budget(url: str, tokens: int | None = None) -> dict[str, float]:
    async with open_pool(settings_for(url), max_size=1) as pool:
        if tokens is not None:
            await set_budget(pool, BudgetTarget("acme", "tenant"), "day", "tokens", Decimal(tokens))
        [row] = await report(pool, TenantId("acme"), datetime.now(UTC))
    return {"spent": row["spent"], "reserved": row["reserved"]}


def test_eval_charges_the_tenant_only_when_asked(
    kb_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    url = kb_database_url  # the eval refuses a tenant without a knowledge base
    dataset = tmp_path / "cases.jsonl"
    lines = [json.dumps({"id": f"c{i}", "question": q, "locale": "en-US"}) for i, q in enumerate(QUESTIONS)]
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    worst = answer_input_bound(MODEL, Settings(environment="dev").context_tokens) + 4096
    # One worst case fits; after it settles (120 tokens) a second does not.
    assert asyncio.run(_budget(url, worst + 60)) == {"spent": 0, "reserved": 0}
    with ProviderDouble() as double:
        double.default = Behaviour(usage=(100, 20, 0))
        env = {"CHATBOT_DATABASE_URL": url, "CHATBOT_MODEL": MODEL, "CHATBOT_MODEL_BASE_URL": double.openai_base_url}
        base = ["eval", "--tenant", "acme", "--dataset", str(dataset), "--model", MODEL, "--concurrency", "1"]
        free = CliRunner().invoke(cli, [*base, "--out", str(tmp_path / "free")], env=env)
        assert free.exit_code == 0, free.output
        assert len(double.requests) == 3
        assert asyncio.run(_budget(url)) == {"spent": 0, "reserved": 0}  # not counted
        charged = CliRunner().invoke(cli, [*base, "--charge-tenant", "--out", str(tmp_path / "charged")], env=env)
        assert charged.exit_code == 0, charged.output
        assert len(double.requests) == 4  # one more call: the one that fit
    results = json.loads((tmp_path / "charged" / "report.json").read_text(encoding="utf-8"))["cases"]
    errors = [case["results"][0]["error"] for case in results]
    assert errors == [None, "budget_exhausted", "budget_exhausted"]
    assert asyncio.run(_budget(url)) == {"spent": 120, "reserved": 0}
