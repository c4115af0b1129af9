"""The demo's own evaluation, as the README prints it: the offline responder answers from
the section that answers, in English and in Persian, and the README's figures are the ones
`chatbot eval` gives today."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chatbot.evaluation.runner import Report
from chatbot.evaluation.sections import cited_section, knowledge_titles, section_hit_rates
from tests.fixtures.knowledge import DEMO_KB

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
README_EXAMPLE = "How do I cancel my car body policy?"


@pytest.fixture(scope="module")
def report(kb_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Report:
    out = tmp_path_factory.mktemp("demo-eval")
    command = [sys.executable, "-m", "chatbot.cli", "eval", "--dataset", str(DEMO_KB / "eval.jsonl"),
               "--model", "offline", "--tenant", "acme", "--out", str(out)]  # fmt: skip
    done = subprocess.run(
        command, env={**os.environ, "CHATBOT_DATABASE_URL": kb_database_url}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    parsed: Report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return parsed


def test_every_answerable_case_names_its_section_in_both_languages() -> None:
    cases = [json.loads(line) for line in (DEMO_KB / "eval.jsonl").read_text(encoding="utf-8").splitlines()]
    titles = set(knowledge_titles([DEMO_KB]).values())
    labelled = [c for c in cases if (c.get("expect") or {}).get("citations")]
    assert all(c["expect"].get("section") in titles for c in labelled)  # each names a real section
    assert {c["id"][:3] for c in labelled} == {"en-", "fa-"}
    assert any(c["question"] == README_EXAMPLE for c in labelled)


def test_the_offline_responder_answers_from_the_right_section(report: Report) -> None:
    titles = knowledge_titles([DEMO_KB])
    rates = section_hit_rates(report, titles)["offline"]
    assert rates["en"] is not None and rates["en"] >= 0.95, rates
    assert rates["fa"] is not None and rates["fa"] >= 0.95, rates
    (example,) = [c for c in report["cases"] if c["question"] == README_EXAMPLE]
    assert (
        cited_section(example["results"][0]["citations"], titles) == "Cancelling a policy and refunds › How to cancel"
    )


def test_the_readme_prints_the_baseline_eval_gives(report: Report) -> None:
    (model,) = report["models"]
    row = re.search(r"^\| offline \| (\d+) \| ([\d.]+) \| ([\d.]+) \| (\d+) \| (\d+) \|", README, re.MULTILINE)
    assert row, "the README's report table has no offline row"
    printed = [int(row[1]), float(row[2]), float(row[3]), int(row[4]), int(row[5])]
    assert printed == [model["cases"], model["status_accuracy"], model["citation_hit_rate"], model["failed"],
                       model["incomplete"]]  # fmt: skip
    rates = section_hit_rates(report, knowledge_titles([DEMO_KB]))["offline"]
    assert f"section hit rate: English {rates['en']}, Persian {rates['fa']}" in README
