"""Nothing in the service's set-up destroys run records (docs/records.md, "What would destroy it")."""

from __future__ import annotations

import json
import re
from pathlib import Path

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.shallow import AsyncShallowPostgresSaver, ShallowPostgresSaver

from tests.fixtures.app import running_app, services_of
from tests.fixtures.tokens import auth

ROOT = Path(__file__).resolve().parents[2]
# Calls that delete checkpoints other than whole threads: pruning to the latest checkpoint
# (a thread's every earlier run record goes) and the shallow savers (they keep only one).
DESTROYERS = re.compile(r"keep_latest|ShallowPostgresSaver|\.a?prune\(|delete_for_runs")


async def test_the_running_service_keeps_every_checkpoint_of_every_run(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        saver = services_of(client).graph.checkpointer
        # A full saver: one checkpoint per run stays, and with it the run's record.
        assert isinstance(saver, AsyncPostgresSaver)
        assert not isinstance(saver, AsyncShallowPostgresSaver | ShallowPostgresSaver)
        assert getattr(saver, "ttl", None) is None  # no expiry on checkpoints
        run_ids = []
        for turn in range(3):
            response = await client.post(
                "/v1/threads/kept/runs",
                json={"message": {"content": f"hello number {turn}"}},
                headers={"Accept": "application/json", **auth(locale="en-US")},
            )
            run_ids.append(response.json()["run_id"])
        for run_id in run_ids:  # the first run's record survives the later ones
            record = await client.get(f"/v1/threads/kept/runs/{run_id}", headers=auth())
            assert record.status_code == 200 and record.json()["status"] != "error"


def test_no_code_prunes_checkpoints_or_gives_them_a_lifetime() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "src").rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if DESTROYERS.search(line)
    ]
    assert offenders == []
    config = ROOT / "langgraph.json"  # LangGraph's server reads a checkpointer TTL from here
    if config.exists():
        assert "ttl" not in (json.loads(config.read_text(encoding="utf-8")).get("checkpointer") or {})
