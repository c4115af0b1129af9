"""The transcript endpoints in-process: message paging, thread deletion and run feedback."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_of_threads
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.messages import send_for_answer
from tests.fixtures.models import ScriptedChatModel
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until

EN = {"locale": "en-US"}
JSON = {"Accept": "application/json"}
TURNS = (0, 1, 19, 20, 21, 250)
LIMITS = (1, 7, 20, 100)
BULK_TENANT = "bulk"  # the 250-turn thread's tenant has no knowledge base: its runs stay cheap
QUESTIONS = (
    "How do I file a car body claim and which documents do I need?",
    "qwzx plorf",
    "What does travel insurance cover for medical costs abroad?",
    "  بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟ \n",  # kept as sent, spaces too
    "How do I cancel my car body policy?",
)
RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|\+00:00)$")
CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
MESSAGE_KEYS = {"id", "role", "content", "created_at", "run_id", "citations"}


def turn_of(content: str, end: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the two messages a turn should add to the transcript."""
    return [
        {"role": "user", "content": content, "run_id": end["run_id"], "citations": []},
        {
            "id": end["message"]["id"],
            "role": "assistant",
            "content": end["message"]["content"],
            "run_id": end["run_id"],
            "citations": end["citations"],
        },
    ]


def thread_token(turns: int) -> dict[str, Any]:
    """Return the token arguments of the paging thread with `turns` turns."""
    return {"tenant": BULK_TENANT, **EN} if turns == 250 else EN


async def build_paging_threads(url: str) -> dict[int, list[dict[str, Any]]]:
    """Create the paging threads through the runs endpoint; return each one's expected transcript."""
    await load_demo_kb(url)

    async def build(client: httpx.AsyncClient, turns: int) -> list[dict[str, Any]]:
        transcript: list[dict[str, Any]] = []
        for i in range(turns):
            content = QUESTIONS[i % len(QUESTIONS)] if turns < 250 else f"qwzx plorf number {i}?"
            end = await send_for_answer(client, f"paging-{turns}", content, **thread_token(turns))
            transcript += turn_of(content, end)
        return transcript

    async with running_app(url) as client:  # threads side by side: runs wait on Postgres a good part
        transcripts = await asyncio.gather(*(build(client, turns) for turns in TURNS))
    return dict(zip(TURNS, transcripts, strict=True))


@pytest.fixture(scope="module")
def paging_threads(migrated_database_url: str) -> dict[int, list[dict[str, Any]]]:
    """Return the expected transcript of each paging thread, built once per module."""
    return asyncio.run(build_paging_threads(migrated_database_url))


async def walk(client: httpx.AsyncClient, thread: str, limit: int, headers: dict[str, str]) -> list[list[Any]]:
    """Follow `next_before` from the newest page until `has_more` is false; return the pages."""
    pages: list[list[Any]] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit} if before is None else {"limit": limit, "before": before}
        response = await client.get(f"/v1/threads/{thread}/messages", params=params, headers=headers)
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"messages", "has_more", "next_before"}
        assert len(body["messages"]) <= limit
        pages.append(body["messages"])
        if not body["has_more"]:
            assert body["next_before"] is None
            return pages
        assert len(body["messages"]) == limit  # only the oldest page may be short
        assert isinstance(body["next_before"], str)
        before = body["next_before"]
        assert len(pages) <= 1000, "paging does not end"


def check_message_shape(message: dict[str, Any]) -> None:
    """Assert the API form of one message."""
    assert set(message) == MESSAGE_KEYS
    assert message["role"] in ("user", "assistant")  # never system, summary or tool traffic
    assert RFC3339_UTC.match(message["created_at"]), message["created_at"]
    assert datetime.fromisoformat(message["created_at"]).utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert uuid.UUID(message["run_id"])
    assert isinstance(message["id"], str) and message["id"]
    if message["role"] == "user":
        assert message["citations"] == []


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("turns", TURNS)
async def test_paging_returns_the_whole_transcript_once_and_in_order(
    paging_threads: dict[int, list[dict[str, Any]]], client: httpx.AsyncClient, turns: int, limit: int
) -> None:
    thread, headers = f"paging-{turns}", auth(**thread_token(turns))
    if turns == 0:  # no run ever happened: the thread does not exist
        response = await client.get(f"/v1/threads/{thread}/messages", params={"limit": limit}, headers=headers)
        assert response.status_code == 404
        return
    pages = await walk(client, thread, limit, headers)
    assert len(pages) == -(-2 * turns // limit)
    messages = [m for page in reversed(pages) for m in page]
    for page in pages:
        for message in page:
            check_message_shape(message)
    ids = [m["id"] for m in messages]
    assert len(set(ids)) == len(ids) == 2 * turns
    assert [m["role"] for m in messages] == ["user", "assistant"] * turns
    created = [datetime.fromisoformat(m["created_at"]) for m in messages]
    assert created == sorted(created)
    expected = paging_threads[turns]
    assert [{k: v for k, v in m.items() if k in e} for m, e in zip(messages, expected, strict=True)] == expected
    for user, answer in zip(messages[::2], messages[1::2], strict=True):
        assert user["run_id"] == answer["run_id"]
    if turns < 250:
        assert any(m["citations"] for m in messages[1::2])  # answered turns cite their chunks


async def test_newest_page_holds_the_newest_messages_oldest_first(
    paging_threads: dict[int, list[dict[str, Any]]], client: httpx.AsyncClient
) -> None:
    response = await client.get("/v1/threads/paging-21/messages", headers=auth(**EN))
    body = response.json()
    assert [m["content"] for m in body["messages"]] == [m["content"] for m in paging_threads[21][-20:]]
    assert body["has_more"] is True
    older = await client.get(
        "/v1/threads/paging-21/messages", params={"before": body["next_before"]}, headers=auth(**EN)
    )
    assert [m["content"] for m in older.json()["messages"]] == [m["content"] for m in paging_threads[21][2:22]]
    assert older.json()["has_more"] is True
    oldest = await client.get(
        "/v1/threads/paging-21/messages", params={"before": older.json()["next_before"]}, headers=auth(**EN)
    )
    assert [m["content"] for m in oldest.json()["messages"]] == [m["content"] for m in paging_threads[21][:2]]
    assert (oldest.json()["has_more"], oldest.json()["next_before"]) == (False, None)


async def test_summary_and_system_text_never_appear(
    paging_threads: dict[int, list[dict[str, Any]]], client: httpx.AsyncClient
) -> None:
    state = await services_of(client).graph.aget_state({"configurable": {"thread_id": "paging-250"}})
    summary = state.values.get("summary")
    assert summary  # 250 turns are well past the point where older turns are summarised
    pages = await walk(client, "paging-250", 100, auth(**thread_token(250)))
    contents = {m["content"] for page in pages for m in page}
    assert summary not in contents
    assert contents == {m["content"] for m in paging_threads[250]}


@pytest.mark.parametrize(
    "params", [{"limit": 0}, {"limit": 101}, {"limit": -1}, {"limit": "ten"}, {"before": "no-such-message"}], ids=str
)
async def test_bad_limit_or_unknown_before_gets_422(
    paging_threads: dict[int, list[dict[str, Any]]], client: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    response = await client.get("/v1/threads/paging-19/messages", params=params, headers=auth(**EN))
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_a_message_id_of_another_thread_is_an_unknown_before(
    paging_threads: dict[int, list[dict[str, Any]]], client: httpx.AsyncClient
) -> None:
    foreign = (await client.get("/v1/threads/paging-20/messages", headers=auth(**EN))).json()["messages"][-1]["id"]
    response = await client.get("/v1/threads/paging-19/messages", params={"before": foreign}, headers=auth(**EN))
    assert response.status_code == 422


async def test_unknown_thread_and_thread_of_another_tenant_get_404(
    paging_threads: dict[int, list[dict[str, Any]]], client: httpx.AsyncClient
) -> None:
    unknown = await client.get("/v1/threads/never-was/messages", headers=auth(**EN))
    foreign = await client.get("/v1/threads/paging-19/messages", headers=auth(tenant="globex", **EN))
    for response in (unknown, foreign):
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("application/problem+json")
    assert foreign.json() == unknown.json()  # indistinguishable from a missing thread
    shape = await client.get("/v1/threads/never-was/messages", params={"limit": 0}, headers=auth(**EN))
    assert shape.status_code == 422  # request shape answers before the thread lookup


async def test_a_thread_whose_only_run_failed_pages_to_the_users_message(migrated_database_url: str) -> None:
    async with running_app(migrated_database_url, agent_overrides={"chat_model": ScriptedChatModel()}) as client:
        response = await client.post(
            "/v1/threads/failed-only/runs", json={"message": {"content": "hello?"}}, headers={**auth(**EN), **JSON}
        )
        assert response.status_code == 502
        for limit in LIMITS:
            pages = await walk(client, "failed-only", limit, auth(**EN))
            assert [[(m["role"], m["content"]) for m in page] for page in pages] == [[("user", "hello?")]]


# --- deletion --------------------------------------------------------------------------------------


RECALL_TABLES = {"thread_turns", "thread_terms"}


async def rows_mentioning(url: str, thread: str) -> dict[str, int]:
    """Count the rows of `thread` in every table with a `thread_id` column (as the catalogue lists them)."""
    counts = rows_of_threads(url, [thread])
    assert {*CHECKPOINT_TABLES, "run_feedback"} <= counts.keys()
    return counts


async def pending_memory_job(url: str, thread: str, run_id: str) -> None:
    """Leave a memory job of `thread` pending, as a replica killed before its memory work leaves it
    (claimed for an hour, so no pickup works it meanwhile).

    A worked job's row is gone with its memory write, so without this the deletion would
    be shown purging a table that was already empty.
    """
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "insert into memory_jobs (thread_id, run_id, tenant_id, user_id, locale, user_text, created_at,"
            " claimed_until) values (%s, %s, 't1', 'u1', 'en', 'pending', now(), now() + interval '1 hour')",
            (thread, run_id),
        )


async def memory_jobs_of_run(url: str, thread: str, run_id: str) -> int:
    """Count the memory jobs of one run."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "select count(*) from memory_jobs where thread_id = %s and run_id = %s", (thread, run_id)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def rate(
    client: httpx.AsyncClient, thread: str, run_id: str, score: str = "up", comment: str | None = None, **token: Any
) -> httpx.Response:
    """Post feedback on one run."""
    return await client.post(
        f"/v1/threads/{thread}/runs/{run_id}/feedback", json={"score": score, "comment": comment}, headers=auth(**token)
    )


async def test_delete_purges_every_row_of_the_thread_and_its_feedback(
    migrated_database_url: str, client: httpx.AsyncClient
) -> None:
    url = migrated_database_url
    first = await send_for_answer(client, "to-delete", "How do I renew third-party insurance?", **EN)
    await send_for_answer(client, "to-delete", "And how do I cancel my car body policy?", **EN)
    assert (await rate(client, "to-delete", first["run_id"], "up", "clear", **EN)).status_code == 204
    await send_for_answer(client, "bystander", "How do I renew third-party insurance?", **EN)
    await pending_memory_job(url, "to-delete", first["run_id"])
    await pending_memory_job(url, "bystander", "seeded-run")
    before = await rows_mentioning(url, "to-delete")
    # Recall indexes a thread only once it outgrows its window (tests/recall covers its rows' deletion).
    assert all(count for table, count in before.items() if table not in RECALL_TABLES), before
    bystander = await rows_mentioning(url, "bystander")

    response = await client.delete("/v1/threads/to-delete", headers=auth(**EN))
    assert response.status_code == 204 and response.content == b""

    assert await rows_mentioning(url, "to-delete") == dict.fromkeys(before, 0)
    # Other threads untouched (the bystander's own memory job may be worked meanwhile, so it is
    # compared apart: its seeded, claimed job must still be there).
    after = await rows_mentioning(url, "bystander")
    assert {**after, "memory_jobs": 0} == {**bystander, "memory_jobs": 0}
    assert await memory_jobs_of_run(url, "bystander", "seeded-run") == 1
    gone = await client.get("/v1/threads/to-delete/messages", headers=auth(**EN))
    assert gone.status_code == 404
    assert (await rate(client, "to-delete", first["run_id"], **EN)).status_code == 404
    again = await client.delete("/v1/threads/to-delete", headers=auth(**EN))
    assert again.status_code == 204


async def test_a_new_run_on_a_deleted_thread_starts_a_fresh_thread(client: httpx.AsyncClient) -> None:
    for content in ("How do I renew third-party insurance?", "qwzx plorf", "What about travel insurance?"):
        await send_for_answer(client, "reborn", content, **EN)
    assert (await client.delete("/v1/threads/reborn", headers=auth(**EN))).status_code == 204
    end = await send_for_answer(client, "reborn", "How do I cancel my car body policy?", **EN)
    body = (await client.get("/v1/threads/reborn/messages", headers=auth(**EN))).json()
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("user", "How do I cancel my car body policy?"),
        ("assistant", end["message"]["content"]),
    ]
    assert {m["run_id"] for m in body["messages"]} == {end["run_id"]}
    assert body["has_more"] is False
    assert end["status"] == "answered"  # no unanswered streak carried over from the deleted thread


async def test_delete_of_a_thread_that_never_existed_gets_204(client: httpx.AsyncClient) -> None:
    response = await client.delete("/v1/threads/never-existed", headers=auth(**EN))
    assert response.status_code == 204


async def test_delete_by_another_tenant_gets_204_and_deletes_nothing(
    migrated_database_url: str, client: httpx.AsyncClient
) -> None:
    end = await send_for_answer(client, "kept", "How do I renew third-party insurance?", **EN)
    assert (await rate(client, "kept", end["run_id"], "down", **EN)).status_code == 204
    await services_of(client).memory.drain(10)  # the turn's memory job row goes when its work lands
    before = await rows_mentioning(migrated_database_url, "kept")
    response = await client.delete("/v1/threads/kept", headers=auth(tenant="globex", **EN))
    assert response.status_code == 204
    assert await rows_mentioning(migrated_database_url, "kept") == before
    body = (await client.get("/v1/threads/kept/messages", headers=auth(**EN))).json()
    assert [m["run_id"] for m in body["messages"]] == [end["run_id"]] * 2


async def test_delete_while_a_run_is_in_flight_gets_409(migrated_database_url: str) -> None:
    async with running_app(migrated_database_url, offline_token_delay_ms=30) as client:
        run = asyncio.create_task(send_for_answer(client, "in-flight", "qwzx plorf", **EN))  # a 28-token answer

        async def transcript_page() -> httpx.Response | None:
            page = await client.get("/v1/threads/in-flight/messages", headers=auth(**EN))
            return page if page.status_code == 200 else None

        # The user's message is durable (and the lock held) before the answer streams.
        page = await wait_until(transcript_page, what="the user's message in the transcript")
        assert page is not None
        assert [m["role"] for m in page.json()["messages"]] == ["user"]
        response = await client.delete("/v1/threads/in-flight", headers=auth(**EN))
        assert response.status_code == 409
        assert response.headers["content-type"].startswith("application/problem+json")
        end = await run
        body = (await client.get("/v1/threads/in-flight/messages", headers=auth(**EN))).json()
        assert [m["id"] for m in body["messages"]][-1] == end["message"]["id"]  # the run finished intact
        assert (await client.delete("/v1/threads/in-flight", headers=auth(**EN))).status_code == 204
        left = await rows_mentioning(migrated_database_url, "in-flight")
        assert left == dict.fromkeys(left, 0)


# --- feedback --------------------------------------------------------------------------------------


async def feedback_rows(url: str, thread: str) -> list[dict[str, Any]]:
    """Return the feedback rows of `thread`."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cur = await conn.execute(
            "select run_id::text as run_id, tenant_id, user_id, score, comment, created_at, updated_at "
            "from run_feedback where thread_id = %s order by run_id",
            (thread,),
        )
        return list(await cur.fetchall())


async def test_feedback_is_recorded_and_replaced_on_resend(
    migrated_database_url: str, client: httpx.AsyncClient
) -> None:
    end = await send_for_answer(client, "rated", "How do I renew third-party insurance?", user="u7", **EN)
    first = await rate(client, "rated", end["run_id"], "up", "Clear and quick.", user="u7", **EN)
    assert first.status_code == 204 and first.content == b""
    [row] = await feedback_rows(migrated_database_url, "rated")
    assert (row["run_id"], row["tenant_id"], row["user_id"], row["score"], row["comment"]) == (
        end["run_id"],
        "acme",
        "u7",
        "up",
        "Clear and quick.",
    )

    second = await rate(client, "rated", end["run_id"], "down", "Actually, it missed the deadline.", user="u7", **EN)
    assert second.status_code == 204
    [replaced] = await feedback_rows(migrated_database_url, "rated")
    assert (replaced["score"], replaced["comment"]) == ("down", "Actually, it missed the deadline.")
    assert replaced["updated_at"] >= row["updated_at"]

    third = await client.post(
        f"/v1/threads/rated/runs/{end['run_id']}/feedback", json={"score": "up"}, headers=auth(user="u7", **EN)
    )
    assert third.status_code == 204
    [last] = await feedback_rows(migrated_database_url, "rated")
    assert (last["score"], last["comment"]) == ("up", None)


async def test_feedback_on_a_run_that_is_not_of_this_thread_gets_404(
    migrated_database_url: str, client: httpx.AsyncClient
) -> None:
    await send_for_answer(client, "fb-one", "How do I renew third-party insurance?", **EN)
    other = await send_for_answer(client, "fb-other", "How do I renew third-party insurance?", **EN)
    for run_id in (str(uuid.uuid4()), other["run_id"]):
        response = await rate(client, "fb-one", run_id, **EN)
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("application/problem+json")
    assert (await rate(client, "no-such-thread", other["run_id"], **EN)).status_code == 404
    assert await feedback_rows(migrated_database_url, "fb-one") == []


async def test_feedback_on_a_thread_of_another_tenant_gets_404(
    migrated_database_url: str, client: httpx.AsyncClient
) -> None:
    end = await send_for_answer(client, "fb-foreign", "How do I renew third-party insurance?", **EN)
    response = await rate(client, "fb-foreign", end["run_id"], "down", "spam", tenant="globex", **EN)
    assert response.status_code == 404
    unknown = await rate(client, "no-such-thread", end["run_id"], tenant="globex", **EN)
    assert response.json() == unknown.json()
    assert await feedback_rows(migrated_database_url, "fb-foreign") == []


@pytest.mark.parametrize(
    "body",
    [
        {"score": "up", "comment": "x" * 2001},
        {"score": "meh"},
        {"score": "UP"},
        {"score": None},
        {},
        {"score": "up", "tenant_id": "acme"},
        {"score": "up", "comment": 5},
    ],
    ids=["long-comment", "meh", "upper-case", "null-score", "empty", "tenant-in-body", "number-comment"],
)
async def test_bad_feedback_bodies_get_422(
    migrated_database_url: str, client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    thread = f"fb-bad-{uuid.uuid4().hex[:8]}"
    end = await send_for_answer(client, thread, "How do I renew third-party insurance?", **EN)
    response = await client.post(f"/v1/threads/{thread}/runs/{end['run_id']}/feedback", json=body, headers=auth(**EN))
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert await feedback_rows(migrated_database_url, thread) == []


async def test_a_comment_of_exactly_2000_characters_is_kept(
    migrated_database_url: str, client: httpx.AsyncClient
) -> None:
    end = await send_for_answer(client, "fb-2000", "How do I renew third-party insurance?", **EN)
    comment = "خوب " * 500  # 2000 characters, more than 2000 bytes
    assert (await rate(client, "fb-2000", end["run_id"], "up", comment, **EN)).status_code == 204
    [row] = await feedback_rows(migrated_database_url, "fb-2000")
    assert row["comment"] == comment


@pytest.mark.parametrize("run_id", ["not-a-uuid", "1234", "g" * 32])
async def test_a_run_id_that_is_no_uuid_is_no_run_of_the_thread(client: httpx.AsyncClient, run_id: str) -> None:
    await send_for_answer(client, "fb-malformed", "How do I renew third-party insurance?", **EN)
    response = await rate(client, "fb-malformed", run_id, **EN)
    assert response.status_code == 404  # the contract: 404 when run_id is not a run of this thread
