"""A value split over two messages is refused only when the messages say it is one value.

Two readings of one mileage (or street number, premium, year, age) are a changed fact: the
new one is kept and the old one goes to the history, in English and in Persian. A national
ID, a card number or a health word split with a continuation cue ("it ends in", "the rest
is", «آخرش», «بقیه‌اش», «ادامه‌اش») leaves nothing in the store nor in the next run's window.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from chatbot.memory._consolidation import StoredFact, consolidate
from chatbot.memory.extraction import extract_offline
from chatbot.memory.pii import PiiCategory, find_pii, joined_rejection_reason, normalize_for_pii
from tests.fixtures.app import running_app, services_of
from tests.fixtures.memory_pii_corpus import contains_needle, fa, luhn_card, national_id
from tests.fixtures.messages import send_for_answer
from tests.fixtures.number_changes import KINDS, TRIGGERS, random_changes, writer_decision
from tests.fixtures.tokens import auth
from tests.memory.test_pii_spellings import SPLITS

CHANGES = 2000
SEED = 20261206
MOST_REFUSED = CHANGES * 0.005  # the goal: at most 0.5 % of benign changes refused

NID = national_id("001234567")
CARD = luhn_card("603799751234567")
# Splits with a continuation cue, a labelled half, and a health word cut in two, in both languages.
CUED_SPLITS = [
    (f"my national ID is {NID[:5]}", f"it ends in {NID[5:]}", PiiCategory.NATIONAL_ID),
    (f"the first part of my number is {NID[:5]}", f"and then {NID[5:]}", PiiCategory.NATIONAL_ID),
    (f"my card number is {CARD[:4]} {CARD[4:8]}", f"the rest is {CARD[8:12]} {CARD[12:]}", PiiCategory.CARD_NUMBER),
    ("my condition is type 2 dia", "it ends in betes", PiiCategory.HEALTH),
    (f"کد ملی من {fa(NID[:5])} است", f"آخرش {fa(NID[5:])} است", PiiCategory.NATIONAL_ID),
    (f"شماره کارتم {fa(CARD[:8])} است", f"بقیه‌اش {fa(CARD[8:])} است", PiiCategory.CARD_NUMBER),
    ("وضعیت من نوع ۲ دیا", "ادامه‌اش بت است", PiiCategory.HEALTH),
    ("مشکل من دیا", "و با بت تمام می‌شود", PiiCategory.HEALTH),
    (f"my national ID begins {NID[:5]}", f"the last five digits are {NID[5:]}", PiiCategory.NATIONAL_ID),
    (f"کد ملی من {fa(NID[:5])} است", f"ادامه: {fa(NID[5:])}", PiiCategory.NATIONAL_ID),
]
NEEDLES = (NID[:5], NID[5:], CARD[:8], CARD[8:], "dia", "betes", "دیا", "بت")
# One change per kind and language through the app: values whose digits, read side by side,
# made a national ID with a valid check digit (12345 67891), or a wording keyed only now.
APP_CHANGES = [
    ("en", "my car mileage is 12345 km", "my car mileage is 67891 km now"),
    ("en", "my address is number 12, street 345", "my address is number 67, street 891"),
    ("en", "my annual premium is 12345 dollars", "my annual premium is 67891 dollars"),
    ("en", "I was born in 1985", "my birth year is 1986"),
    ("en", "my age is 34", "I am 35 years old"),
    ("fa", "کارکرد ماشینم ۱۲۳۴۵ کیلومتر است", "کارکرد ماشینم الان ۶۷۸۹۱ کیلومتر است"),
    ("fa", "آدرس من پلاک ۱۲ خیابان ۳۴۵ است", "آدرس من پلاک ۶۷ خیابان ۸۹۱ است"),
    ("fa", "حق بیمه من ۱۲۳۴۵ تومان است", "حق بیمه من ۶۷۸۹۱ تومان است"),
    ("fa", "سال تولدم ۱۳۶۴ است", "متولد سال ۱۳۶۵ هستم"),
    ("fa", "سن من ۳۴ سال است", "من ۳۵ سال دارم"),
]


def test_number_changes_of_five_kinds_are_kept_and_the_old_values_go_to_the_history() -> None:
    drawn = random_changes(CHANGES, SEED)
    decisions = [(change, writer_decision(change, others)) for change, others in drawn]
    assert {(c.kind, c.language) for c, _ in decisions} == {(k, lang) for k in KINDS for lang in TRIGGERS}
    refused = [change for change, decision in decisions if decision.refused]
    assert len(refused) <= MOST_REFUSED, (len(refused), refused[:5])
    not_in_history = [change for change, decision in decisions if not decision.refused and not decision.closed]
    assert not_in_history == []


@pytest.mark.parametrize(("first", "second", "category"), CUED_SPLITS)
def test_a_value_split_with_a_continuation_cue_is_refused(first: str, second: str, category: PiiCategory) -> None:
    assert find_pii(first) == [] and find_pii(second) == []  # each alone passes
    assert joined_rejection_reason(first, second) == category


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("my car mileage is 12345 km", "my car mileage is 67891 km now"),
        ("my address is number 12, street 345", "my address is number 67, street 891"),
        ("کارکرد ماشینم ۱۲۳۴۵ کیلومتر است", "ماشینم ۶۷۸۹۱ کیلومتر کار کرده"),
        # The same ordinary kind in both is a changed fact even when a word reads like a cue.
        ("my car mileage is 12345 km", "then my car mileage was 67891 km"),
    ],
)
def test_two_values_of_one_ordinary_kind_are_not_one_number(first: str, second: str) -> None:
    assert joined_rejection_reason(first, second) is None


def _trigger(text: str) -> str:
    return TRIGGERS["fa"] if any("\u0600" <= c <= "\u06ff" for c in text) else TRIGGERS["en"]


async def _remembered(client: httpx.AsyncClient, user: str) -> dict[str, Any]:
    response = await client.get(f"/v1/users/{user}/memory?history=true", headers=auth(user=user))
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_changed_number_is_the_current_fact_and_the_old_one_is_in_the_history(
    isolated_database_url: str,
) -> None:
    async with running_app(isolated_database_url) as client:
        for i, (language, old, new) in enumerate(APP_CHANGES):
            for statement in (old, new):
                await send_for_answer(client, f"change-{i}", TRIGGERS[language] + statement, user=f"change-{i}")
                await services_of(client).memory.drain(30)
        remembered = [await _remembered(client, f"change-{i}") for i in range(len(APP_CHANGES))]
    current = [[fact["text"] for fact in memory["facts"]] for memory in remembered]
    # The history lists the current version too (valid until null): the closed ones are the old values.
    history = [[entry["text"] for entry in memory["history"] if entry["valid_until"]] for memory in remembered]
    assert current == [[new] for _, _, new in APP_CHANGES]
    assert history == [[old] for _, old, _ in APP_CHANGES]


async def test_split_values_leave_nothing_in_the_store_nor_in_the_next_runs_window(isolated_database_url: str) -> None:
    cases = [(first, second) for first, second, _ in [*SPLITS, *CUED_SPLITS]]
    contexts = []
    async with running_app(isolated_database_url) as client:
        for i, (first, second) in enumerate(cases):
            for half in (first, second):
                await send_for_answer(client, f"split-{i}", _trigger(first) + half, user=f"split-{i}")
                await services_of(client).memory.drain(30)
            end = await send_for_answer(client, f"next-{i}", "what do you remember about me?", user=f"split-{i}")
            record = await client.get(f"/v1/threads/next-{i}/runs/{end['run_id']}", headers=auth(user=f"split-{i}"))
            assert record.status_code == 200, record.text
            context = record.json()["context"]
            # What the model was given: ids and the prompt's hash are left out (hex may hold any digits).
            contexts.append([context["summary"], context["profile"], context["facts"], context["recalled"]])
            contexts[-1].append([message["content"] for message in context["messages"]])
        left = [(await _remembered(client, f"split-{i}"))["facts"] for i in range(len(cases))]
    assert left == [[] for _ in cases]
    assert [context[2] for context in contexts] == [[] for _ in cases]
    given = normalize_for_pii(json.dumps(contexts, ensure_ascii=False))
    with psycopg.connect(isolated_database_url) as conn:
        stored = " ".join(normalize_for_pii(str(r[0])) for r in conn.execute("select value::text from store"))
    for needle in NEEDLES:
        assert not contains_needle(stored, needle), needle
        assert not contains_needle(given, needle), needle


@pytest.mark.parametrize(
    ("own", "other"),
    [
        ("سن من ۳۴ سال است", "سن پسرم ۱۲ سال است"),
        ("سال تولدم ۱۳۶۵ است", "پسرم متولد ۱۳۹۰ است"),
        ("آدرس من پلاک ۱۲ خیابان ۳۴۵ است", "آدرس دفتر بیمه خیابان ولیعصر پلاک ۷ است"),
        ("I was born in 1985", "my son was born in 2010"),
    ],
)
def test_a_number_about_someone_else_does_not_replace_the_users_own(own: str, other: str) -> None:
    (stored,) = extract_offline(_trigger(own) + own).facts
    (new,) = extract_offline(_trigger(other) + other).facts
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    plan = consolidate([StoredFact("own", stored.text, stored.category, stored.key, moment)], [new])
    assert plan.closes == [] and "own" not in [fact_id for fact_id, _ in plan.puts]
