"""The feedback export: one JSON line per rated run, matching what was asked, answered and rated."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from chatbot.agent.state import RECENT_MESSAGES
from chatbot.cli.main import app as cli
from chatbot.db.pool import Pool, make_pool
from chatbot.threads.export import FeedbackRecord, export_feedback
from tests.fixtures.app import running_app
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.messages import JSON_ACCEPT, send_for_answer, send_message
from tests.fixtures.models import ScriptedChatModel
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

EN = {"locale": "en-US"}
EXPORT_KEY = "export-key-" + "q7" * 20
RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
KEYS = {
    "thread_id",
    "run_id",
    "tenant_id",
    "locale",
    "user_key",
    "score",
    "comment",
    "rated_at",
    "user_message",
    "answer",
    "citations",
    "status",
}


async def rate(
    client: httpx.AsyncClient, thread: str, run_id: str, score: str, comment: str | None, **token: Any
) -> None:
    """Rate one run; the service must accept it."""
    response = await client.post(
        f"/v1/threads/{thread}/runs/{run_id}/feedback", json={"score": score, "comment": comment}, headers=auth(**token)
    )
    assert response.status_code == 204, response.text


def line_of(
    thread: str,
    tenant: str,
    question: str,
    end: dict[str, Any],
    score: str,
    comment: str | None,
    locale: str = "en-US",
) -> dict[str, Any]:
    """Return the export line a rated, finished run should produce (without `rated_at`), exported without a key."""
    return {
        "thread_id": thread,
        "run_id": end["run_id"],
        "tenant_id": tenant,
        "locale": locale,
        "user_key": None,
        "score": score,
        "comment": comment,
        "user_message": question,
        "answer": end["message"]["content"],
        "citations": end["citations"],
        "status": end["status"],
    }


async def open_test_pool(url: str) -> Pool:
    """Open a pool with the service's connection options."""
    pool = make_pool(url, settings_for(url), name="export-test", min_size=1, max_size=4)
    await pool.open(wait=True)
    return pool


async def exported(pool: Pool, since: datetime, key: bytes | None = None) -> list[FeedbackRecord]:
    """Return every record the export yields for `since`."""
    return [record async for record in export_feedback(pool, since, key=key)]


def without_rated_at(records: list[FeedbackRecord]) -> list[dict[str, object]]:
    """Check every record's keys and `rated_at`; return the records without `rated_at`."""
    for record in records:
        assert set(record) == KEYS
        assert RFC3339_UTC.match(record["rated_at"]), record["rated_at"]
    return [{k: v for k, v in r.items() if k != "rated_at"} for r in records]


def by_run(records: list[FeedbackRecord]) -> dict[str, FeedbackRecord]:
    """Index records by run id."""
    return {r["run_id"]: r for r in records}


async def test_export_lines_match_what_was_rated(isolated_database_url: str) -> None:
    url = isolated_database_url
    await load_demo_kb(url)
    q1, q2, q3 = (
        "How do I renew third-party insurance?",
        "What does travel insurance cover for medical costs abroad?",
        "How do I cancel my car body policy?",
    )
    fa = "بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟"
    async with running_app(url) as client:
        a1, a2, a3 = [await send_for_answer(client, "exp-a", q, **EN) for q in (q1, q2, q3)]
        b1 = await send_for_answer(client, "exp-b", fa)  # Persian, answered in Persian
        # No knowledge base: clarifying.
        g1 = await send_for_answer(client, "exp-g", "qwzx plorf", tenant="globex", **EN)
        await rate(client, "exp-a", a1["run_id"], "up", "Clear, with the 30-day window.", **EN)
        await rate(client, "exp-a", a3["run_id"], "down", None, **EN)
        await rate(client, "exp-a", a3["run_id"], "up", "On second thought, fine.", **EN)  # replaces the first
        await rate(client, "exp-b", b1["run_id"], "up", "عالی بود")
        await rate(client, "exp-g", g1["run_id"], "down", "Did not understand me.", tenant="globex", **EN)
    async with running_app(url, agent_overrides={"chat_model": ScriptedChatModel(mode="fail")}) as client:
        failed = (await send_message(client, "exp-f", "Is anyone there?", accept=JSON_ACCEPT, **EN)).json()
        assert failed["status"] == 502
        page = (await client.get("/v1/threads/exp-f/messages", headers=auth(**EN))).json()
        failed_run = page["messages"][0]["run_id"]
        await rate(client, "exp-f", failed_run, "down", "No answer at all.", **EN)

    assert a1["status"] == "answered" and a1["citations"] and g1["status"] == "clarifying"
    expected = [
        line_of("exp-a", "acme", q1, a1, "up", "Clear, with the 30-day window."),
        line_of("exp-a", "acme", q3, a3, "up", "On second thought, fine."),
        line_of("exp-b", "acme", fa, b1, "up", "عالی بود", locale="fa-IR"),
        {
            "thread_id": "exp-f",
            "run_id": failed_run,
            "tenant_id": "acme",
            "locale": "en-US",
            "user_key": None,
            "score": "down",
            "comment": "No answer at all.",
            "user_message": "Is anyone there?",
            "answer": None,
            "citations": [],
            "status": None,
        },
        line_of("exp-g", "globex", "qwzx plorf", g1, "down", "Did not understand me."),
    ]
    pool = await open_test_pool(url)
    try:
        records = await exported(pool, datetime.now(UTC) - timedelta(hours=1))
        assert sorted(without_rated_at(records), key=lambda r: (r["thread_id"], r["run_id"])) == sorted(
            expected, key=lambda r: (r["thread_id"], r["run_id"])
        )
        assert a2["run_id"] not in by_run(records)  # never rated, never exported
        assert [r["thread_id"] for r in records] == sorted(r["thread_id"] for r in records)  # grouped by thread
        rated_at = datetime.fromisoformat(by_run(records)[a3["run_id"]]["rated_at"])
        assert rated_at >= datetime.fromisoformat(by_run(records)[a1["run_id"]]["rated_at"])

        assert await exported(pool, datetime.now(UTC) + timedelta(minutes=1)) == []
        cut = max(datetime.fromisoformat(r["rated_at"]) for r in records) + timedelta(milliseconds=5)
        await wait_until(lambda: datetime.now(UTC) > cut, what="the clock past the cut")
        async with running_app(url) as client:
            await rate(client, "exp-a", a1["run_id"], "down", "Changed my mind.", **EN)
        [changed] = without_rated_at(await exported(pool, cut))  # only what was rated since the cut
        assert changed == line_of("exp-a", "acme", q1, a1, "down", "Changed my mind.")
    finally:
        await pool.close()


async def test_a_run_older_than_the_models_recent_list_exports_in_full(isolated_database_url: str) -> None:
    url = isolated_database_url
    turns = RECENT_MESSAGES // 2 + 3  # the first turn is no longer in the graph state's recent messages
    async with running_app(url) as client:
        ends = [await send_for_answer(client, "long", f"qwzx plorf {i}", tenant="globex", **EN) for i in range(turns)]
        await rate(client, "long", ends[0]["run_id"], "down", "First answer.", tenant="globex", **EN)
        await rate(client, "long", ends[-1]["run_id"], "up", None, tenant="globex", **EN)
    pool = await open_test_pool(url)
    try:
        records = without_rated_at(await exported(pool, datetime.now(UTC) - timedelta(hours=1)))
    finally:
        await pool.close()
    assert sorted(records, key=lambda r: str(r["run_id"])) == sorted(
        [
            line_of("long", "globex", "qwzx plorf 0", ends[0], "down", "First answer."),
            line_of("long", "globex", f"qwzx plorf {turns - 1}", ends[-1], "up", None),
        ],
        key=lambda r: r["run_id"],
    )


async def prepare_cli_thread(url: str) -> tuple[str, dict[str, Any]]:
    """Create one answered run and rate it; return its question and `end` object."""
    await load_demo_kb(url)
    question = "How do I file a car body claim and which documents do I need?"
    async with running_app(url) as client:
        end = await send_for_answer(client, "cli-thread", question, **EN)
        await rate(client, "cli-thread", end["run_id"], "up", "Helpful list of documents.", **EN)
    return question, end


def test_the_command_writes_json_lines(isolated_database_url: str, tmp_path: Path) -> None:
    question, end = asyncio.run(prepare_cli_thread(isolated_database_url))
    expected = line_of("cli-thread", "acme", question, end, "up", "Helpful list of documents.")
    pseudonym = hmac.new(EXPORT_KEY.encode(), b"acme\x00u1", hashlib.sha256).hexdigest()
    runner = CliRunner()
    env = {"CHATBOT_DATABASE_URL": isolated_database_url, "CHATBOT_EXPORT_KEY": EXPORT_KEY}
    target = tmp_path / "feedback.jsonl"

    to_file = runner.invoke(cli, ["feedback", "export", "--since", "2000-01-01", "--output", str(target)], env=env)
    assert to_file.exit_code == 0, to_file.output
    lines = target.read_text(encoding="utf-8").splitlines()
    assert without_rated_at([json.loads(line) for line in lines]) == [{**expected, "user_key": pseudonym}]

    to_stdout = runner.invoke(cli, ["feedback", "export", "--since", "2000-01-01T00:00:00+03:30"], env=env)
    assert to_stdout.exit_code == 0
    assert without_rated_at([json.loads(line) for line in to_stdout.stdout.splitlines()]) == [
        {**expected, "user_key": pseudonym}
    ]

    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    none = runner.invoke(cli, ["feedback", "export", "--since", tomorrow], env=env)
    assert none.exit_code == 0 and none.stdout == ""

    bad = runner.invoke(cli, ["feedback", "export", "--since", "last week"], env=env)
    assert bad.exit_code == 2


def test_the_command_refuses_cohorts_without_a_strong_key(isolated_database_url: str) -> None:
    question, end = asyncio.run(prepare_cli_thread(isolated_database_url))
    runner = CliRunner()
    env = {"CHATBOT_DATABASE_URL": isolated_database_url, "CHATBOT_EXPORT_KEY": ""}
    no_key = runner.invoke(cli, ["feedback", "export", "--since", "2000-01-01"], env=env)
    assert no_key.exit_code == 2 and no_key.stdout == ""
    short = runner.invoke(
        cli, ["feedback", "export", "--since", "2000-01-01"], env={**env, "CHATBOT_EXPORT_KEY": "too-short"}
    )
    assert short.exit_code == 2 and short.stdout == ""
    keyless = runner.invoke(cli, ["feedback", "export", "--since", "2000-01-01", "--without-user-key"], env=env)
    assert keyless.exit_code == 0
    expected = line_of("cli-thread", "acme", question, end, "up", "Helpful list of documents.")
    assert without_rated_at([json.loads(line) for line in keyless.stdout.splitlines()]) == [expected]


async def test_export_cohorts_pseudonymise_users_under_the_key(isolated_database_url: str) -> None:
    url = isolated_database_url
    raters = [
        ("acme", "cohort-user-alpha", "en-US", "c-a1"),
        ("acme", "cohort-user-alpha", "en-US", "c-a2"),
        ("acme", "cohort-user-beta", "fa-IR", "c-b1"),
        ("globex", "cohort-user-alpha", "en-GB", "c-g1"),  # the same id in another tenant: another person
    ]
    async with running_app(url) as client:
        for tenant, user, locale, thread in raters:
            end = await send_for_answer(client, thread, "qwzx plorf", tenant=tenant, user=user, locale=locale)
            await rate(client, thread, end["run_id"], "up", None, tenant=tenant, user=user, locale=locale)
    pool = await open_test_pool(url)
    try:
        since = datetime.now(UTC) - timedelta(hours=1)
        first = {r["thread_id"]: r for r in await exported(pool, since, key=EXPORT_KEY.encode())}
        again = {r["thread_id"]: r for r in await exported(pool, since, key=EXPORT_KEY.encode())}
        other: dict[str, FeedbackRecord] = {
            r["thread_id"]: r for r in await exported(pool, since, key=b"another-key-" + b"z" * 32)
        }
    finally:
        await pool.close()
    assert {t: (r["tenant_id"], r["locale"]) for t, r in first.items()} == {
        thread: (tenant, locale) for tenant, _, locale, thread in raters
    }
    dump = json.dumps(list(first.values()) + list(other.values()))
    assert "cohort-user" not in dump  # the raw ids never leave
    keys: dict[str, str | None] = {t: r["user_key"] for t, r in first.items()}
    assert all(re.fullmatch(r"[0-9a-f]{64}", k or "") for k in keys.values())
    assert keys["c-a1"] == keys["c-a2"]  # same user, same key
    assert len({keys["c-a1"], keys["c-b1"], keys["c-g1"]}) == 3  # another user, or another tenant's
    assert keys == {t: r["user_key"] for t, r in again.items()}  # stable across exports
    assert all(other[t]["user_key"] != keys[t] for t in keys)  # another key, other pseudonyms
    assert other["c-a1"]["user_key"] == other["c-a2"]["user_key"]
