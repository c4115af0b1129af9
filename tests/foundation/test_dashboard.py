"""deploy/grafana's dashboard plots only metrics the service exports (a renamed metric breaks it silently)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.fixtures.app import running_app

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "chatbot-service.json"
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",)}


def exported(exposition: str) -> set[str]:
    """Return every series name a /metrics page can carry, from its TYPE lines."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            base = name.removesuffix("_total") if kind == "counter" else name
            names.add(name)
            names.update(base + suffix for suffix in _SUFFIXES.get(kind, ()))
    return names


async def test_every_dashboard_query_names_a_metric_the_service_exports(migrated_database_url: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    async with running_app(migrated_database_url) as client:
        names = exported((await client.get("/metrics")).text)
    used = {m for q in queries for m in re.findall(r"\bchatbot_[a-z_]+\b", q)}
    assert len(queries) >= 10 and used
    assert used - names == set()
    # What an operator looks for first is on it.
    for wanted in ("chatbot_runs_total", "chatbot_runs_in_flight", "chatbot_model_tokens_total",
                   "chatbot_run_first_token_seconds_bucket", "chatbot_model_calls_total"):  # fmt: skip
        assert wanted in used
