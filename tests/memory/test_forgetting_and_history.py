"""Forgetting a fact forgets what the profile took from it; a changed fact is closed, not duplicated."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import BaseMessage

from chatbot.memory import _profile_sources as profile_sources
from chatbot.memory._consolidation import StoredFact, consolidate
from chatbot.memory._profile_sources import ProfileSources
from chatbot.memory.extraction import FactCandidate, Profile, extract_offline, merge_profile
from chatbot.responses import UserMemory
from tests.fixtures.app import running_app, services_of
from tests.fixtures.messages import send_for_answer
from tests.fixtures.tokens import auth

EN = {"locale": "en-US"}
TURN_A = {"thread_id": "t", "run_id": "a"}
TURN_B = {"thread_id": "t", "run_id": "b"}


def _turn(
    message: str, turn: dict[str, str], profile: Profile, sources: ProfileSources, fact_id: str
) -> tuple[Profile, ProfileSources]:
    found = extract_offline(message)
    facts = [(fact_id, fact) for fact in found.facts]
    merged = merge_profile(profile, found.profile_updates)
    return merged, profile_sources.record(sources, found.profile_updates, facts, turn, merged)


def test_an_entry_a_fact_gave_goes_with_the_fact() -> None:
    profile, sources = _turn("remember that I have two children", TURN_A, {}, {}, "f1")
    assert profile["household"] == ["children:2"]
    assert sources["household"]["children:2"] == [{**TURN_A, "fact_id": "f1"}]
    after, left = profile_sources.forget(profile, sources, "f1")
    assert "household" not in after and "household" not in left
    assert after["language"] == "en"  # how the turn was written is the turn's, not the fact's


def test_an_entry_another_turn_also_gave_stays() -> None:
    profile, sources = _turn("remember that I have body insurance", TURN_A, {}, {}, "f1")
    profile, sources = _turn("how much does body insurance cost?", TURN_B, profile, sources, "unused")
    after, _ = profile_sources.forget(profile, sources, "f1")
    assert after["products"] == ["car_body"]  # asked about in run b, outside any fact


def test_entries_without_sources_are_left_alone() -> None:
    after, _ = profile_sources.forget({"household": ["married"]}, {}, "f1")
    assert after == {"household": ["married"]}


def test_a_changed_fact_closes_the_stored_version() -> None:
    stored = [StoredFact("v", "I drive a Peugeot 206", "vehicle", "vehicle", datetime(2026, 1, 1, tzinfo=UTC))]
    (new,) = extract_offline("remember that I sold the Peugeot, I drive a motorcycle now").facts
    plan = consolidate(stored, [new])
    assert plan.closes == ["v"] and [fact_id for fact_id, _ in plan.puts] == ["v"] and plan.deletes == []
    same = consolidate(stored, [FactCandidate("I drive a Peugeot 206", "vehicle", "vehicle")])
    assert same.closes == []  # a restatement refreshes, it closes nothing


async def _memory(client: Any, *, history: bool = False) -> dict[str, Any]:
    response = await client.get(f"/v1/users/u1/memory{'?history=true' if history else ''}", headers=auth(**EN))
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_forgetting_a_fact_leaves_nothing_derived_in_the_profile_or_the_next_run(
    isolated_database_url: str,
) -> None:
    windows: list[Sequence[BaseMessage]] = []
    async with running_app(isolated_database_url, agent_overrides={"window_observer": windows.append}) as client:
        await send_for_answer(client, "kids", "remember that I have two children", **EN)
        await services_of(client).memory.drain(30)
        before = await _memory(client)
        assert before["profile"]["household"] == ["children:2"]
        (fact,) = before["facts"]
        forgotten = await client.delete(f"/v1/users/u1/memory/facts/{fact['id']}", headers=auth(**EN))
        assert forgotten.status_code == 204
        after = await _memory(client)
        end = await send_for_answer(client, "later", "What does travel insurance cover?", **EN)
        record = (await client.get(f"/v1/threads/later/runs/{end['run_id']}", headers=auth(**EN))).json()
    assert after["facts"] == [] and "household" not in after["profile"]
    assert after["profile"]["language"] == "en"  # what the turn gave outside the fact stays
    assert "household" not in record["context"]["profile"] and record["context"]["facts"] == []
    assert "children" not in str(windows[-1][0].content)


async def test_a_changed_fact_replaces_the_old_one_for_the_model_and_the_history_shows_both(
    isolated_database_url: str,
) -> None:
    windows: list[Sequence[BaseMessage]] = []
    async with running_app(isolated_database_url, agent_overrides={"window_observer": windows.append}) as client:
        first = await send_for_answer(client, "car", "remember that I drive a Peugeot 206", **EN)
        await services_of(client).memory.drain(30)
        second = await send_for_answer(
            client, "car", "remember that I sold the Peugeot, I drive a motorcycle now", **EN
        )
        await services_of(client).memory.drain(30)
        current = await _memory(client)
        full = await _memory(client, history=True)
        await send_for_answer(client, "later", "What does body insurance cover?", **EN)
        reset = await client.delete("/v1/users/u1/memory", headers=auth(**EN))
        emptied = await _memory(client, history=True)
    assert [f["text"] for f in current["facts"]] == ["I sold the Peugeot, I drive a motorcycle now"]
    assert "history" not in current
    UserMemory.model_validate(full)  # the contract's shape, parsed as the typed client parses it
    closed, now = full["history"]
    assert set(closed) == {"id", "text", "category", "valid_from", "valid_until", "source", "closed_by"}
    assert closed["text"] == "I drive a Peugeot 206" and closed["id"] != current["facts"][0]["id"]
    assert closed["source"] == {"thread_id": "car", "run_id": first["run_id"]}
    assert closed["closed_by"] == {"thread_id": "car", "run_id": second["run_id"]}
    moments = [datetime.fromisoformat(m) for m in (closed["valid_from"], closed["valid_until"], now["valid_from"])]
    assert moments[0] < moments[1] <= moments[2]
    assert now["id"] == current["facts"][0]["id"] and now["valid_until"] is None and now["closed_by"] is None
    assert now["source"] == {"thread_id": "car", "run_id": second["run_id"]}
    system = str(windows[-1][0].content)
    assert "motorcycle" in system and "Peugeot 206" not in system  # the model sees the current one
    assert reset.status_code == 204 and emptied["facts"] == [] and emptied["history"] == []


async def test_forgetting_a_fact_takes_its_closed_versions_too(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        await send_for_answer(client, "pref", "remember that I prefer email", **EN)
        await services_of(client).memory.drain(30)
        await send_for_answer(client, "pref", "remember that I prefer phone calls", **EN)
        await services_of(client).memory.drain(30)
        full = await _memory(client, history=True)
        assert len(full["history"]) == 2
        (fact,) = full["facts"]
        assert (await client.delete(f"/v1/users/u1/memory/facts/{fact['id']}", headers=auth(**EN))).status_code == 204
        after = await _memory(client, history=True)
    assert after["facts"] == [] and after["history"] == []
