"""`chatbot eval` is not counted against a tenant's budgets unless `--charge-tenant` asks for it.

Stopped (Ctrl-C or SIGTERM) mid-call, it gives its holds back before it exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
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
            await set_budget(pool, BudgetTarget(TenantId("acme"), "tenant"), "day", "tokens", Decimal(tokens))
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
    # Any window and its output fit; after the first call settles (`worst` + 40) no other does.
    assert asyncio.run(_budget(url, worst + 60)) == {"spent": 0, "reserved": 0}
    with ProviderDouble() as double:
        double.default = Behaviour(usage=(worst, 40, 0))
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
    assert asyncio.run(_budget(url)) == {"spent": worst + 40, "reserved": 0}


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_charged_eval_gives_its_holds_back_before_it_exits(
    kb_database_url: str, tmp_path: Path, stop: signal.Signals
) -> None:
    url = kb_database_url
    dataset = tmp_path / "cases.jsonl"
    lines = [json.dumps({"id": f"c{i}", "question": q, "locale": "en-US"}) for i, q in enumerate(QUESTIONS)]
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    asyncio.run(_budget(url, 10**9))
    with ProviderDouble() as double:
        double.hold()  # every case's call stays in flight until the process is stopped
        env = {
            **os.environ,
            "CHATBOT_DATABASE_URL": url,
            "CHATBOT_MODEL": MODEL,
            "CHATBOT_MODEL_BASE_URL": double.openai_base_url,
            "OPENAI_API_KEY": "test-key",
            # Long: only a release, not an expiry, can free the holds within the test.
            "CHATBOT_BUDGET_RESERVATION_SECONDS": "600",
        }
        args = ["eval", "--tenant", "acme", "--dataset", str(dataset), "--model", MODEL, "--charge-tenant"]
        process = subprocess.Popen(
            [sys.executable, "-m", "chatbot.cli", *args, "--concurrency", "3", "--out", str(tmp_path / "out")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert double.wait_for(lambda d: len(d.requests) == 3, timeout=60)
            assert asyncio.run(_budget(url))["reserved"] > 0  # three calls held
            process.send_signal(stop)
            _, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
        double.release()
    assert process.returncode != 0
    assert b"not settled" not in err and b"Traceback" not in err, err
    assert asyncio.run(_budget(url))["reserved"] == 0
    assert asyncio.run(_held_rows(url)) == 0


async def _held_rows(url: str) -> int:
    async with open_pool(settings_for(url), max_size=1) as pool, pool.connection() as conn:
        cur = await conn.execute("select count(*) as n from budget_reservations where tenant_id = 'acme'")
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])
