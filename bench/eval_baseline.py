"""The offline responder's own scores on knowledge/demo/eval.jsonl: the baseline a real model must beat.

Ingests the demo knowledge base for tenant `acme` into a bench database, then runs
`chatbot eval --dataset knowledge/demo/eval.jsonl --model offline` (the command itself, in
a subprocess) and prints the report's figures: status accuracy and citation hit rate,
overall and per kind of case (the prefix of a case id's second part: `tpl`, `unknown`,
`human`, `followup`, `inject`, ...), the section hit rate per language
(evaluation/sections.py), plus the cases it got wrong.

Usage: python -m bench.eval_baseline [--model offline] [--keep DIR]
Uses CHATBOT_DATABASE_URL (migrated here) or starts an embedded Postgres under a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from bench._pg import bench_database
from chatbot.config import Settings
from chatbot.db.pool import make_pool
from chatbot.evaluation.cases import Expectation
from chatbot.evaluation.runner import Report
from chatbot.evaluation.scoring import cites_expected
from chatbot.evaluation.sections import knowledge_titles, section_hit_rates
from chatbot.ids import TenantId
from chatbot.retrieval.ingest import ingest_paths

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "knowledge" / "demo"
DATASET = KB / "eval.jsonl"


async def _ingest(url: str) -> None:
    pool = make_pool(url, Settings(environment="dev", database_url=url), name="bench", min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        await ingest_paths(pool, TenantId("acme"), [KB])
    finally:
        await pool.close()


def _kind(case_id: str) -> str:
    _, _, rest = case_id.partition("-")
    kind = rest.split("-")[0]
    if kind == "other":
        return "other-tenant"
    return kind if kind in ("unknown", "human", "followup", "inject") else "answerable"


def _print(report: Report) -> None:
    sections = section_hit_rates(report, knowledge_titles([KB]))
    for model in report["models"]:
        print(f"model {model['model']}: {model['cases']} cases")
        print(f"  status accuracy    {model['status_accuracy']}")
        print(f"  citation hit rate  {model['citation_hit_rate']}")
        by_language = sections[model["model"]]
        print(f"  section hit rate   en {by_language['en']}  fa {by_language['fa']}")
        print(f"  latency p50/p95 ms {model['latency_ms']['p50']} / {model['latency_ms']['p95']}")
    groups: dict[str, list[tuple[bool, bool | None]]] = defaultdict(list)
    wrong = []
    for case in report["cases"]:
        expect, result = case["expect"] or Expectation(status=None, citations=[]), case["results"][0]
        right = result["status"] == expect.get("status")
        hit = cites_expected(result["citations"], expect["citations"]) if expect.get("citations") else None
        groups[_kind(case["id"])].append((right, hit))
        if not right or hit is False:
            cited = "" if hit is None else f", cited {'an expected' if hit else 'no expected'} document"
            wrong.append(f"  {case['id']}: expected {expect.get('status')}, got {result['status']}{cited}")
    print("by kind (status right / cases, citations hit / cases with expected citations):")
    for kind, marks in sorted(groups.items()):
        hits = [h for _, h in marks if h is not None]
        print(f"  {kind:<13} {sum(r for r, _ in marks)}/{len(marks)}   {sum(hits)}/{len(hits)}")
    print(f"missed ({len(wrong)}):", *wrong, sep="\n")


async def main(model: str, keep: Path | None) -> None:
    async with bench_database("eval_baseline") as url:
        await _ingest(url)
        with tempfile.TemporaryDirectory(prefix="chatbot-eval-") as tmp:
            out = keep or Path(tmp)
            command = [sys.executable, "-m", "chatbot.cli", "eval", "--dataset", str(DATASET), "--model", model,
                       "--tenant", "acme", "--out", str(out)]  # fmt: skip
            env = {**os.environ, "CHATBOT_DATABASE_URL": url}
            done = await asyncio.to_thread(subprocess.run, command, env=env, check=False)
            if done.returncode != 0:
                raise SystemExit(f"chatbot eval exited {done.returncode}")
            _print(json.loads((out / "report.json").read_text(encoding="utf-8")))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="offline")
    parser.add_argument("--keep", type=Path, default=None, help="Write the report here and keep it.")
    args = parser.parse_args()
    asyncio.run(main(args.model, args.keep))
