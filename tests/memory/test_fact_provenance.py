"""Facts say which run wrote them, one fact can be forgotten, and pending memory work is a row erasure removes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg

from chatbot.memory.extraction import MemoryCandidates
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.writer import offline_extractor
from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_containing
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until
from tests.memory.test_memory_e2e import memory_of, say

EN = {"locale": "en-US"}


def _run_id(events: list[tuple[str, dict[str, Any]]]) -> str:
    return str(events[-1][1]["run_id"])


async def _facts_when(client: httpx.AsyncClient, done: Any, **token: Any) -> list[dict[str, Any]]:
    """Wait until GET memory's facts make `done(facts)` hold (memory lands after the answer)."""

    async def settled() -> list[dict[str, Any]] | None:
        facts: list[dict[str, Any]] = (await memory_of(client, **token))["facts"]
        return facts if done(facts) else None

    return await wait_until(settled, what="the remembered facts")


def _job_rows(url: str, user: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select count(*) from memory_jobs where user_id = %s", (user,)).fetchone()
    return int(row[0]) if row else 0


async def test_facts_name_the_run_that_wrote_them_last_and_one_can_be_forgotten(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        car = _run_id(await say(client, "prov-a", "remember that my car is a Peugeot 206", **EN))
        city = _run_id(await say(client, "prov-a", "remember that I live in Shiraz", **EN))
        facts = await _facts_when(client, lambda fs: len(fs) == 2, **EN)
        by_text = {f["text"]: f for f in facts}
        assert by_text["my car is a Peugeot 206"]["source"] == {"thread_id": "prov-a", "run_id": car}
        assert by_text["I live in Shiraz"]["source"] == {"thread_id": "prov-a", "run_id": city}

        # A restatement on another thread takes over the fact: the source is now that run.
        changed = _run_id(await say(client, "prov-b", "remember that my car is a Peugeot 405", **EN))
        facts = await _facts_when(client, lambda fs: any("405" in f["text"] for f in fs), **EN)
        car_fact = next(f for f in facts if "Peugeot" in f["text"])
        assert len(facts) == 2 and car_fact["id"] == by_text["my car is a Peugeot 206"]["id"]
        assert car_fact["source"] == {"thread_id": "prov-b", "run_id": changed}
        assert next(f for f in facts if "Shiraz" in f["text"])["source"] == {"thread_id": "prov-a", "run_id": city}

        profile = (await memory_of(client, **EN))["profile"]
        assert profile
        path = f"/v1/users/u1/memory/facts/{car_fact['id']}"
        assert (await client.delete(path, headers=auth(**EN))).status_code == 204
        after = await memory_of(client, **EN)
        assert [f["text"] for f in after["facts"]] == ["I live in Shiraz"] and after["profile"] == profile
        assert (await client.delete(path, headers=auth(**EN))).status_code == 404  # already gone
        # Someone else's fact id, another tenant, another user: 404, 404, 403; nothing changes.
        shiraz = after["facts"][0]["id"]
        other_tenant = await client.delete(f"/v1/users/u1/memory/facts/{shiraz}", headers=auth("globex", **EN))
        other_user = await client.delete(f"/v1/users/u1/memory/facts/{shiraz}", headers=auth(user="u2", **EN))
        assert (other_tenant.status_code, other_user.status_code) == (404, 403)
        assert (await memory_of(client, **EN))["facts"] == after["facts"]
    assert _job_rows(isolated_database_url, "u1") == 0  # done jobs leave no row


async def test_an_erasure_while_memory_work_is_pending_leaves_no_job_row_and_no_fact(
    isolated_database_url: str,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(job: MemoryJob) -> MemoryCandidates:
        started.set()
        await release.wait()
        return await offline_extractor(job)

    async with running_app(isolated_database_url, memory_extractor=slow) as client:
        await say(client, "erase-pending", "remember that my garage is in Tabriz", user="u-erase", **EN)
        await asyncio.wait_for(started.wait(), 10)  # answered; its memory work is pending
        assert _job_rows(isolated_database_url, "u-erase") == 1  # durable before it is done
        erased = await client.delete("/v1/users/u-erase", headers=auth(user="u-erase", **EN))
        assert erased.status_code == 200, erased.text
        assert _job_rows(isolated_database_url, "u-erase") == 0
        release.set()
        await services_of(client).memory.drain(15)
        assert (await memory_of(client, user="u-erase", **EN))["facts"] == []
    assert rows_containing(isolated_database_url, "u-erase") == {}
    assert rows_containing(isolated_database_url, "Tabriz") == {}


def _leave_job(url: str, thread: str, run_id: str, user: str, text: str) -> None:
    """Write a job row as a replica killed after it would have left it: claim run out."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "insert into memory_jobs (thread_id, run_id, tenant_id, user_id, locale, user_text, created_at, "
            "claimed_until, claimed_by) "
            "values (%s, %s, 'acme', %s, 'en-US', %s, now(), now() - interval '1 s', 'gone')",
            (thread, run_id, user, text),
        )


async def test_a_left_job_is_done_once_by_whichever_replica_claims_it_and_only_for_an_answered_run(
    isolated_database_url: str,
) -> None:
    async with running_app(isolated_database_url) as a, running_app(isolated_database_url) as b:
        # An answered run (its own memory written first, then its row is left again below).
        answered = _run_id(await say(a, "left-1", "remember that I like green tea", user="u-left", **EN))
        escalated = _run_id(await say(a, "left-2", "I want to talk to a human", user="u-left", **EN))
        await services_of(a).memory.drain(10)
        _leave_job(isolated_database_url, "left-1", answered, "u-left", "remember that my boat is called Nilufar")
        _leave_job(isolated_database_url, "left-2", escalated, "u-left", "remember that my bike is called Simorgh")
        writers = [services_of(a).memory, services_of(b).memory]
        claimed = await asyncio.gather(*(w.pick_up() for w in writers))
        assert sum(claimed) == 2  # each row claimed by one replica only
        for writer in writers:
            await writer.drain(15)
        facts = [f["text"] for f in (await memory_of(a, user="u-left", **EN))["facts"]]
    assert facts == ["I like green tea", "my boat is called Nilufar"]  # the escalated run's job wrote nothing
    assert _job_rows(isolated_database_url, "u-left") == 0
