"""Recall adds nothing to a short thread, never cuts the question, and reads only the asking thread."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from langchain_core.messages import BaseMessage

from tests.fixtures.app import running_app
from tests.recall.conversation import ask, long_thread

# A small budget: a window of a few turns, so 30 turns are a long thread.
SMALL = 600


def thread_turn_rows(url: str, thread: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select message_id, content from thread_turns where thread_id = %s order by position", (thread,)
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


async def test_a_thread_that_fits_the_window_gets_no_recalled_turns(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        await long_thread(client, "short", "en", 6, {2: "My garage is Golzar Auto on Azadi street."})
        record = await ask(client, "short", "Which garage did I mention?", "en")
    assert record["context"]["recalled"] == []
    assert len(record["context"]["messages"]) == 13  # every turn is in the window
    assert thread_turn_rows(isolated_database_url, "short") == []  # and nothing was indexed


async def test_the_question_is_never_cut_for_recalled_turns(isolated_database_url: str) -> None:
    windows: list[Sequence[BaseMessage]] = []
    seen = {"recalled": 0, "gave_way": 0}
    async with running_app(
        isolated_database_url, context_tokens=SMALL, agent_overrides={"window_observer": windows.append}
    ) as client:
        await long_thread(client, "cut", "en", 30, {3: "The assessor's name was Farhad Rostami, he came on Monday."})
        for words in (5, 60, 120, 180, 240, 300, 400):
            question = "Who was the assessor Farhad? " + " ".join(["please explain the assessment"] * (words // 4))
            record = await ask(client, "cut", question, "en")
            given = record["context"]["messages"][-1]
            assert given["id"] == record["input"]["id"]
            assert str(windows[-1][-1].content) == given["content"]  # the record shows what the model got
            if record["context"]["recalled"]:
                seen["recalled"] += 1
                assert given["content"] == question  # recall never cuts the question
                assert "Farhad Rostami" in str(windows[-1][0].content)
            else:
                seen["gave_way"] += 1
    # Both cases happened: recall with a short question, and a long one that left no room.
    assert seen["recalled"] >= 1 and seen["gave_way"] >= 1, seen


async def test_recalled_turns_come_only_from_the_asking_thread(isolated_database_url: str) -> None:
    others = {
        "same-user": ({}, "The other driver's plate was 11X111."),
        "other-user": ({"user_id": "u2"}, "The other driver's plate was 22Y222."),
        "other-tenant": ({"tenant_id": "globex"}, "The other driver's plate was 33Z333."),
    }
    async with running_app(isolated_database_url, context_tokens=SMALL) as client:
        for thread, (token, detail) in others.items():
            await long_thread(client, thread, "en", 30, {3: detail}, **token)
            await ask(client, thread, "What was the other driver's plate?", "en", **token)  # indexed and recalled
        await long_thread(client, "mine", "en", 30, {3: "The other driver's plate was 52K913."})
        record = await ask(client, "mine", "What was the other driver's plate?", "en")
    recalled = record["context"]["recalled"]
    assert any("52K913" in r["content"] for r in recalled)
    mine = dict(thread_turn_rows(isolated_database_url, "mine"))
    for turn in recalled:
        assert mine[turn["id"]] == turn["content"]  # every recalled turn is this thread's
    for _, detail in others.values():
        assert all(detail not in r["content"] for r in recalled)
