"""`GET …/memory`'s body as memory/read.py builds it: the wire form the endpoint always had.

The body is a `UserMemory` model now, not a dict shaped in the handler; these pin what a
model would otherwise change: moments as the store writes them (UTC, `Z`, microseconds on
fact versions even when they are zero), `history` absent unless asked for, facts oldest first.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from chatbot.memory import read
from chatbot.memory.items import Lifetime, StoredItem

TEHRAN = timezone(timedelta(hours=3, minutes=30))
ROUND = datetime(2026, 3, 2, 9, 15, 6, tzinfo=UTC)  # no microseconds: the edge of the wire form


async def _body(
    found: read.Remembered, closed: list[StoredItem], *, history: bool, monkeypatch: pytest.MonkeyPatch
) -> str:
    async def remembered(*_: object, **__: object) -> read.Remembered:
        return found

    async def versions(*_: object, **__: object) -> list[StoredItem]:
        return closed

    monkeypatch.setattr(read, "read_memory", remembered)
    monkeypatch.setattr(read, "read_history", versions)
    answer = await read.user_memory(None, "acme", "u1", max_facts=10, lifetime=Lifetime(), history=history)  # type: ignore[arg-type]
    return json.dumps(answer.model_dump(mode="json", exclude_unset=True), ensure_ascii=False, separators=(",", ":"))


async def test_current_facts_are_oldest_first_in_utc_and_history_stays_out_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    newer = StoredItem("f2", {"text": "I live in Shiraz", "category": "location"}, ROUND, ROUND + timedelta(hours=1))
    older = StoredItem(
        "f1",
        {"text": "My car is a Peugeot 206", "source": {"thread_id": "t", "run_id": "r"}},
        ROUND,
        ROUND.astimezone(TEHRAN),  # as a session in another time zone reads it
    )
    body = await _body(read.Remembered({"language": "fa"}, [newer, older]), [], history=False, monkeypatch=monkeypatch)
    assert body == (
        '{"user_id":"u1","profile":{"language":"fa"},"facts":['
        '{"id":"f1","text":"My car is a Peugeot 206","category":"general","updated_at":"2026-03-02T09:15:06Z",'
        '"source":{"thread_id":"t","run_id":"r"}},'
        '{"id":"f2","text":"I live in Shiraz","category":"location","updated_at":"2026-03-02T10:15:06Z",'
        '"source":null}]}'
    )


async def test_fact_versions_keep_the_stores_microseconds_and_order_by_belief(monkeypatch: pytest.MonkeyPatch) -> None:
    current = StoredItem(
        "f1",
        {"text": "I drive a Pride", "valid_from": "2026-03-02T10:00:00.000000Z"},
        ROUND,
        ROUND,
    )
    closed = StoredItem(
        "f1~1",
        {
            "text": "I drive a Peugeot 206",
            "valid_until": "2026-03-02T10:00:00.000000Z",
            "closed_by": {"thread_id": "t", "run_id": "b"},
        },
        ROUND,  # no valid_from stored: the item's creation, in the store's form
        ROUND,
    )
    body = json.loads(await _body(read.Remembered({}, [current]), [closed], history=True, monkeypatch=monkeypatch))
    assert [(v["id"], v["valid_from"], v["valid_until"]) for v in body["history"]] == [
        ("f1~1", "2026-03-02T09:15:06.000000Z", "2026-03-02T10:00:00.000000Z"),
        ("f1", "2026-03-02T10:00:00.000000Z", None),
    ]
    assert body["history"][0]["closed_by"] == {"thread_id": "t", "run_id": "b"}
    assert body["history"][1]["closed_by"] is None
