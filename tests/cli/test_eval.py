"""`chatbot eval`: labelled cases and rated runs through a dry graph, against the demo knowledge base.

The offline responder and the provider wire double answer; the knowledge base is the real
Postgres of the fixtures. Every test also counts the rows of every table before and after:
an evaluation reads the service's tables and writes none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest
from typer.testing import CliRunner, Result

from chatbot.cli.main import app as cli
from chatbot.ids import TenantId
from tests.fixtures.app import running_app
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.tokens import auth

MODEL = "openai:gpt-4o-mini"
PRICES = {MODEL: {"input": 0.15, "output": 0.6, "cached_input": 0.075}}
TRAVEL = "What does travel insurance cover for medical costs abroad?"
CASES = [
    {"id": "travel", "question": TRAVEL, "locale": "en-US",
     "expect": {"status": "answered", "citations": ["en/travel.md"]}},
    {"id": "deductible-fa", "question": "فرانشیز بیمه بدنه چند درصد است؟", "locale": "fa-IR",
     "expect": {"status": "answered", "citations": ["fa/badaneh.md"]}},
    {"id": "person", "question": "I want to talk to a human agent please", "locale": "en-US",
     "expect": {"status": "escalate"}},
    {"id": "unknown", "question": "Do you sell pet insurance for my parrot?", "locale": "en-US",
     "expect": {"status": "clarifying"}},
]  # fmt: skip


@pytest.fixture(scope="module")
def kb_url(migrated_database_url: str) -> str:
    asyncio.run(load_demo_kb(migrated_database_url))
    return migrated_database_url


@pytest.fixture(scope="module")
def double() -> Iterator[ProviderDouble]:
    with ProviderDouble() as d:
        yield d


@pytest.fixture(autouse=True)
def _fresh(double: ProviderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    double.reset()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in CASES), encoding="utf-8")
    return path


def row_counts(url: str) -> dict[str, int]:
    """Return the row count of every table of the database (the service's, LangGraph's, the migrations')."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("select tablename from pg_tables where schemaname = 'public'")]
        return {t: conn.execute(f'select count(*) from "{t}"').fetchone()[0] for t in sorted(tables)}  # type: ignore[index]


def chatbot_eval(url: str, double: ProviderDouble, *args: str, prices: bool = True) -> Result:
    """Run `chatbot eval` in-process; CHATBOT_MODEL names the double's model so `--model` takes its base URL."""
    env = {
        "CHATBOT_DATABASE_URL": url,
        "CHATBOT_MODEL": MODEL,
        "CHATBOT_MODEL_BASE_URL": double.openai_base_url,
        "CHATBOT_MODEL_PRICES": json.dumps(PRICES) if prices else "",
    }
    return CliRunner().invoke(cli, ["eval", "--tenant", "acme", *args], env=env)


def travel_chunk(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "select chunk_id from kb_chunks where tenant_id = 'acme' and document_id = 'en/travel.md'"
            " and text like %s and superseded_at is null",
            ("%€50,000%",),
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_a_small_dataset_gives_the_expected_report(
    kb_url: str, double: ProviderDouble, dataset: Path, tmp_path: Path
) -> None:
    chunk = travel_chunk(kb_url)
    # The double answers every case alike, citing the travel chunk: it counts only where retrieval offered it.
    double.default = Behaviour(answer="From the policy.", status="answered", citations=[chunk], usage=(100, 20, 10))
    before = row_counts(kb_url)
    out = tmp_path / "report"
    done = chatbot_eval(kb_url, double, "--dataset", str(dataset), "--model", "offline", "--model", MODEL,
                        "--out", str(out))  # fmt: skip
    assert done.exit_code == 0, done.output
    assert row_counts(kb_url) == before
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert list(report) == ["models", "cases"]
    offline, wired = report["models"]
    keys = ["model", "cases", "status_accuracy", "citation_hit_rate", "incomplete", "failed", "latency_ms",
            "ttft_ms", "tokens", "cost_usd"]  # fmt: skip
    assert list(offline) == keys and list(wired) == keys
    assert [c["id"] for c in report["cases"]] == [c["id"] for c in CASES]
    results = {c["id"]: {r["model"]: r for r in c["results"]} for c in report["cases"]}
    statuses = {case: {model: r["status"] for model, r in by.items()} for case, by in results.items()}
    assert statuses == {
        "travel": {"offline": "answered", MODEL: "answered"},
        "deductible-fa": {"offline": "answered", MODEL: "answered"},
        "person": {"offline": "escalate", MODEL: "answered"},
        "unknown": {"offline": "clarifying", MODEL: "answered"},
    }
    assert results["travel"][MODEL]["citations"] == [chunk]
    assert results["travel"]["offline"]["citations"][0].startswith("en/travel.md#")
    assert results["deductible-fa"]["offline"]["citations"][0].startswith("fa/badaneh.md#")
    assert all(r["error"] is None for by in results.values() for r in by.values())
    assert offline | {"latency_ms": None, "ttft_ms": None} == {
        "model": "offline", "cases": 4, "status_accuracy": 1.0, "citation_hit_rate": 1.0, "incomplete": 0,
        "failed": 0, "latency_ms": None, "ttft_ms": None, "tokens": {"input": 0, "output": 0, "cached_input": 0},
        "cost_usd": 0.0,
    }  # fmt: skip
    # Two of four statuses right; one of two expected citations hit (the Persian case cites no travel chunk).
    assert wired["status_accuracy"] == 0.5 and wired["citation_hit_rate"] == 0.5
    assert wired["tokens"] == {"input": 400, "output": 80, "cached_input": 40}
    assert wired["cost_usd"] == pytest.approx((360 * 0.15 + 40 * 0.075 + 80 * 0.6) / 1e6)
    assert wired["latency_ms"]["p50"] <= wired["latency_ms"]["p95"]
    assert wired["ttft_ms"]["p50"] is not None and len(double.requests) == 4
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert f"## {MODEL}" in markdown and "## offline" in markdown
    # The models disagree on "person" and "unknown"; Persian text is isolated right to left.
    assert "### person" in markdown and "### unknown" in markdown and "### travel" not in markdown
    assert "\u2067فرانشیز بیمه بدنه چند درصد است؟\u2069" in markdown
    no_prices = chatbot_eval(kb_url, double, "--dataset", str(dataset), "--model", "offline", "--out", str(out),
                             prices=False)  # fmt: skip
    assert no_prices.exit_code == 0, no_prices.output
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["models"][0]["cost_usd"] is None


def test_a_failing_case_is_reported_and_the_run_goes_on(
    kb_url: str, double: ProviderDouble, dataset: Path, tmp_path: Path
) -> None:
    # One case at a time, so the scripted behaviours meet the cases in order. The model is the
    # chain's last entry, so its client retries a 500 once: the first case gets two.
    double.script("gpt-4o-mini", Behaviour(http_status=500), Behaviour(http_status=500), Behaviour(finish="cut"))
    done = chatbot_eval(kb_url, double, "--dataset", str(dataset), "--model", MODEL, "--concurrency", "1",
                        "--out", str(tmp_path))  # fmt: skip
    assert done.exit_code == 0, done.output
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    results = [c["results"][0] for c in report["cases"]]
    assert [(r["status"], r["error"]) for r in results] == [
        ("error", "model_failed"),
        ("error", "model_incomplete"),
        ("answered", None),
        ("answered", None),
    ]
    assert results[1]["answer"]  # the part shown before the stream stopped
    (model,) = report["models"]
    assert model["cases"] == 4 and model["failed"] == 2 and model["incomplete"] == 1


def test_fail_under_exits_1_when_a_model_misses_and_0_when_it_meets(
    kb_url: str, double: ProviderDouble, dataset: Path, tmp_path: Path
) -> None:
    double.default = Behaviour(status="answered")
    args = ["--dataset", str(dataset), "--model", "offline", "--model", MODEL, "--out", str(tmp_path)]
    met = chatbot_eval(kb_url, double, *args, "--fail-under", "status_accuracy=0.5", "--fail-under", "cases=4")
    assert met.exit_code == 0, met.output
    missed = chatbot_eval(kb_url, double, *args, "--fail-under", "status_accuracy=0.9")
    assert missed.exit_code == 1, missed.output
    assert f"{MODEL}: status_accuracy = 0.5 is under 0.9" in missed.output and "offline:" not in missed.stderr
    for bad in ("accuracy=0.9", "latency_ms=100", "status_accuracy", "status_accuracy=high"):
        refused = chatbot_eval(kb_url, double, *args, "--fail-under", bad)
        assert refused.exit_code == 2, (bad, refused.output)
        assert "--fail-under" in refused.output
    assert len(double.requests) == 8  # the refused runs stopped before any case ran


async def converse(url: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Talk on two threads with the offline model; rate one run down and one up; return the down-rated run."""
    async with running_app(url) as client:

        async def ask(thread: str, content: str) -> dict[str, Any]:
            response = await client.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": content}},
                headers={**auth(locale="en-US"), "Accept": "application/json"},
            )
            assert response.status_code == 200, response.text
            return dict(response.json())

        async def rate(thread: str, run_id: str, score: str) -> None:
            response = await client.post(
                f"/v1/threads/{thread}/runs/{run_id}/feedback", json={"score": score}, headers=auth(locale="en-US")
            )
            assert response.status_code == 204, response.text

        first = await ask("eval-replay", TRAVEL)
        second = await ask("eval-replay", "How much does it pay for lost baggage?")
        other = await ask("eval-other", "How do I cancel my policy?")
        await rate("eval-replay", second["run_id"], "down")
        await rate("eval-other", other["run_id"], "up")
        record = await client.get(f"/v1/threads/eval-replay/runs/{second['run_id']}", headers=auth(locale="en-US"))
        assert record.status_code == 200
        return first, dict(record.json()), second["message"]["content"]


def test_from_feedback_gives_the_candidate_the_recorded_window(
    kb_url: str, double: ProviderDouble, tmp_path: Path
) -> None:
    first, record, answered = asyncio.run(converse(kb_url))
    before = row_counts(kb_url)
    double.default = Behaviour(answer="Baggage is covered up to €1,000.", status="answered", usage=(50, 10, 0))
    today = datetime.now(UTC).date().isoformat()
    done = chatbot_eval(kb_url, double, "--from-feedback", "--since", today, "--score", "down", "--model", MODEL,
                        "--out", str(tmp_path))  # fmt: skip
    assert done.exit_code == 0, done.output
    assert row_counts(kb_url) == before
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    (case,) = report["cases"]  # the run rated up is left out
    assert case["id"] == f"eval-replay/{record['run_id']}"
    assert case["question"] == record["input"]["content"] and case["expect"] is None
    assert case["reference"] == answered == record["answer"]["content"]
    assert case["results"][0]["answer"] == "Baggage is covered up to €1,000."
    # The candidate got the window the rated run's model saw: its messages in order, its chunks.
    (request,) = double.requests
    sent = request.body["messages"]
    window = record["context"]["messages"]
    assert [m["content"] for m in sent[1:]] == [m["content"] for m in window]
    assert window[0]["content"] == TRAVEL and window[1]["content"] == first["message"]["content"]
    assert record["context"]["retrieved"]
    for chunk in record["context"]["retrieved"]:
        assert chunk["text"].strip() in sent[0]["content"]
    assert report["models"][0]["tokens"] == {"input": 50, "output": 10, "cached_input": 0}
    both = chatbot_eval(kb_url, double, "--from-feedback", "--since", today, "--model", "offline",
                        "--out", str(tmp_path))  # fmt: skip
    assert both.exit_code == 0, both.output
    assert len(json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["cases"]) == 2
    assert row_counts(kb_url) == before


def test_bad_datasets_and_options_are_refused_with_the_reason(
    kb_url: str, double: ProviderDouble, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q?", "expect": {"status": "maybe"}}\n', encoding="utf-8")
    done = chatbot_eval(kb_url, double, "--dataset", str(bad), "--model", "offline", "--out", str(tmp_path))
    assert done.exit_code == 2 and "bad.jsonl:1" in done.output and "expect.status" in done.output
    neither = chatbot_eval(kb_url, double, "--model", "offline", "--out", str(tmp_path))
    assert neither.exit_code == 2
    unknown = chatbot_eval(kb_url, double, "--dataset", str(bad), "--model", "nope", "--out", str(tmp_path))
    assert unknown.exit_code == 2
    assert not (tmp_path / "report.json").exists()


def test_history_reaches_the_model_as_prior_turns(kb_url: str, double: ProviderDouble, tmp_path: Path) -> None:
    path = tmp_path / "follow-up.jsonl"
    history = [{"role": "user", "content": TRAVEL}, {"role": "assistant", "content": "Up to €50,000 on Standard."}]
    case = {"id": "f", "question": "And on the premium plan?", "locale": "en-US", "history": history}
    path.write_text(json.dumps(case) + "\n", encoding="utf-8")
    done = chatbot_eval(kb_url, double, "--dataset", str(path), "--model", MODEL, "--out", str(tmp_path))
    assert done.exit_code == 0, done.output
    (request,) = double.requests
    assert [m["content"] for m in request.body["messages"][1:]] == [TRAVEL, history[1]["content"], case["question"]]


def test_a_progress_bar_is_drawn_on_a_terminal_only(
    kb_url: str, double: ProviderDouble, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--dataset", str(dataset), "--model", "offline", "--out", str(tmp_path)]
    piped = chatbot_eval(kb_url, double, *args)
    assert piped.exit_code == 0 and piped.stderr == ""
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then treats standard error as a terminal
    terminal = chatbot_eval(kb_url, double, *args)
    assert terminal.exit_code == 0, terminal.output
    assert "eval" in terminal.stderr and "4/4" in terminal.stderr


async def test_a_recorded_window_reaches_the_model_whole(double: ProviderDouble) -> None:
    from chatbot.agent._prompts import system_prompt
    from chatbot.agent.system_message import format_system_prompt
    from chatbot.config import Settings
    from chatbot.evaluation.candidates import load_candidate
    from chatbot.evaluation.cases import Case, RecordedWindow, Turn
    from chatbot.evaluation.dry_run import run_case
    from chatbot.responses import QuotedChunk

    chunk = QuotedChunk(chunk_id="en/travel.md#abc", document_id="en/travel.md", version=3, title="Travel",
                        text="Lost baggage: up to €1,000 (as read then).", language="en", score=1.0)  # fmt: skip
    window = RecordedWindow(
        summary="The user asked about travel cover before.",
        profile={"products": ["travel"]},
        facts=("I travel to Spain every summer.", "I have two children."),
        chunks=(chunk,),
        context_tokens=6000,
    )
    history = (Turn("user", "Hi, I am going abroad.", "m1"), Turn("assistant", "How can I help?", "m2"))
    case = Case("r", "How much for lost baggage?", "en-US", history=history, reference="old", window=window)
    settings = Settings(environment="dev", model=MODEL, model_base_url=double.openai_base_url)

    async def no_search(*_: Any) -> NoReturn:
        raise AssertionError("a recorded window is not searched again")

    double.default = Behaviour(answer="Up to €1,000.", citations=[chunk.chunk_id])
    result = await run_case(case, load_candidate(MODEL, settings), tenant_id=TenantId("acme"), settings=settings,
                            search=no_search)  # fmt: skip
    assert (result.status, result.citations, result.error) == ("answered", [chunk.chunk_id], None)
    (request,) = double.requests
    system, *messages = request.body["messages"]
    quoted = QuotedChunk(chunk_id=chunk.chunk_id, title=chunk.title, text=chunk.text, language="en")
    expected = format_system_prompt(system_prompt("en"), profile=window.profile, facts=window.facts,
                                    summary=window.summary, chunks=[quoted], language="en")  # fmt: skip
    assert system["content"] == expected
    assert [m["content"] for m in messages] == ["Hi, I am going abroad.", "How can I help?", case.question]


@pytest.mark.parametrize(
    ("what", "line"),
    [
        ("a lone surrogate in the question", '{"id": "a", "question": "Is \\ud800 covered?"}'),
        ("a lone surrogate in the id", '{"id": "\\udfff", "question": "Is it covered?"}'),
        (
            "U+0000 in a history turn",
            '{"id": "a", "question": "q?", "history": [{"role": "user", "content": "\\u0000"}]}',
        ),
        ("a line nested 100,000 deep", "[" * 100_000 + "]" * 100_000),
    ],
)
def test_a_bad_line_anywhere_exits_2_with_one_line_before_any_case_runs(
    kb_url: str, double: ProviderDouble, tmp_path: Path, what: str, line: str
) -> None:
    data = tmp_path / "cases.jsonl"
    good = "".join(json.dumps({"id": f"travel-{n}", "question": TRAVEL}) + "\n" for n in range(3))
    data.write_text(good + line + "\n", encoding="utf-8")
    out = tmp_path / "out"
    done = chatbot_eval(kb_url, double, "--dataset", str(data), "--model", MODEL, "--out", str(out))
    assert done.exit_code == 2, (what, done.output[-500:])
    assert len(done.output.strip().splitlines()) == 1 and "cases.jsonl:4" in done.output, done.output[-500:]
    assert double.requests == [] and not (out / "report.json").exists()


@pytest.mark.parametrize("what", ["a file", "report.json a folder", "under a file"])
def test_an_out_that_cannot_take_the_reports_exits_2_before_any_case_runs(
    kb_url: str, double: ProviderDouble, dataset: Path, tmp_path: Path, what: str
) -> None:
    out = tmp_path / "out"
    if what == "a file":
        out.write_text("not a folder", encoding="utf-8")
    elif what == "report.json a folder":
        (out / "report.json").mkdir(parents=True)
    else:
        (tmp_path / "file").write_text("x", encoding="utf-8")
        out = tmp_path / "file" / "out"
    done = chatbot_eval(kb_url, double, "--dataset", str(dataset), "--model", MODEL, "--out", str(out))
    assert done.exit_code == 2, (what, done.output[-500:])
    assert len(done.output.strip().splitlines()) == 1 and "--out" in done.output, done.output[-500:]
    assert double.requests == []


def test_a_question_holding_a_line_separator_is_one_case(kb_url: str, double: ProviderDouble, tmp_path: Path) -> None:
    data = tmp_path / "cases.jsonl"
    question = "What does travel insurance cover\u2028for medical costs\u0085 abroad?"
    data.write_text(json.dumps({"id": "sep", "question": question}, ensure_ascii=False) + "\n", encoding="utf-8")
    done = chatbot_eval(kb_url, double, "--dataset", str(data), "--model", "offline", "--out", str(tmp_path / "o"))
    assert done.exit_code == 0, done.output[-800:]
    report = json.loads((tmp_path / "o" / "report.json").read_text(encoding="utf-8"))
    assert [case["id"] for case in report["cases"]] == ["sep"]
