"""Every spelling of a refused value is refused: invisible and lookalike characters, mixed
separators, number words, letters written apart, and a value split over two messages."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from chatbot.memory._consolidation import StoredFact
from chatbot.memory.extraction import FactCandidate, extract_offline
from chatbot.memory.pii import PiiCategory, find_pii, joined_rejection_reason, normalize_for_pii
from chatbot.memory.writer import split_values
from tests.fixtures.app import running_app, services_of
from tests.fixtures.memory_pii_corpus import fa, luhn_card, national_id
from tests.fixtures.memory_poisoning_corpus import BENIGN_FACTS
from tests.fixtures.messages import send_for_answer
from tests.fixtures.tokens import auth

NID = national_id("001234567")
CARD = luhn_card("603799751234567")
EN_WORDS = "zero one two three four five six seven eight nine".split()
FA_WORDS = "صفر یک دو سه چهار پنج شش هفت هشت نه".split()


def between(digits: str, mark: str) -> str:
    return mark.join(digits)


NATIONAL_ID_SPELLINGS = {
    "U+034F": between(NID, "\u034f"),
    "U+FE0F": between(NID, "\ufe0f"),
    "U+2800": between(NID, "\u2800"),
    "U+3164": between(NID, "\u3164"),
    "U+E0020": between(NID, "\U000e0020"),
    "combining marks": "".join(d + "\u0301\u0323" for d in NID),
    "keycaps": "".join(d + "\ufe0f\u20e3" for d in NID),
    "mixed separators": f"{NID[:3]}-{NID[3:6]}.{NID[6:8]} {NID[8:]}",
    "commas": f"{NID[:3]},{NID[3:6]},{NID[6:]}",
    "a comma between each": ",".join(NID),
    "plus signs": "+".join([NID[:4], NID[4:7], NID[7:]]),
    "English number words": " ".join(EN_WORDS[int(d)] for d in NID),
    "Persian number words": " ".join(FA_WORDS[int(d)] for d in NID),
    "fullwidth": NID.translate(str.maketrans("0123456789", "０１２３４５６７８９")),
    "mathematical digits": "".join(chr(0x1D7CE + int(d)) for d in NID),
}
CARD_SPELLINGS = {
    "mixed separators": f"{CARD[:4]}-{CARD[4:8]} {CARD[8:12]}.{CARD[12:]}",
    "plus signs": "+".join([CARD[:4], CARD[4:8], CARD[8:12], CARD[12:]]),
    "U+034F": between(CARD, "\u034f"),
    "Persian digits, mixed": fa(f"{CARD[:4]}/{CARD[4:8]} {CARD[8:12]}-{CARD[12:]}"),
}
HEALTH_SPELLINGS = {
    "ZWSP": "I have dia\u200bbetes",
    "ZWJ": "I have dia\u200dbetes",
    "ZWNJ": "I have dia\u200cbetes",
    "soft hyphen": "I have dia\u00adbetes",
    "Cyrillic a": "I have di\u0430betes",
    "Cyrillic c": "I was diagnosed with \u0441ancer",
    "Greek alpha": "my son has \u03b1sthma",
    "spaced letters": "I have d i a b e t e s",
    "dotted letters": "I have d.i.a.b.e.t.e.s",
    "Persian ZWNJ": "من دیا\u200cبت دارم",
    "Persian ZWSP": "من دیا\u200bبت دارم",
    "Persian spaced letters": "من د ی ا ب ت دارم",
    "Persian Arabic letters": "من ديابت دارم",
    "Persian tatweel": "من دیـــابت دارم",
}


@pytest.mark.parametrize(("name", "spelling"), NATIONAL_ID_SPELLINGS.items())
@pytest.mark.parametrize(
    "context", ["remember that my national ID is {}", "remember that {} is my code", "یادت باشد کد ملی من {} است"]
)
def test_a_national_id_in_any_spelling_stores_nothing(name: str, spelling: str, context: str) -> None:
    found = extract_offline(context.format(spelling))
    assert found.facts == [], name
    assert found.rejected == [PiiCategory.NATIONAL_ID]


@pytest.mark.parametrize(("name", "spelling"), CARD_SPELLINGS.items())
@pytest.mark.parametrize(
    "context", ["remember that my card is {}", "remember {} for payouts", "یادت باشه کارتم {} است"]
)
def test_a_card_number_in_any_spelling_stores_nothing(name: str, spelling: str, context: str) -> None:
    found = extract_offline(context.format(spelling))
    assert found.facts == [], name
    assert found.rejected == [PiiCategory.CARD_NUMBER]


@pytest.mark.parametrize(("name", "spelling"), HEALTH_SPELLINGS.items())
def test_a_health_word_in_any_spelling_stores_nothing(name: str, spelling: str) -> None:
    trigger = "یادت باشد " if "من" in spelling else "remember that "
    found = extract_offline(trigger + spelling)
    assert found.facts == [], name
    assert found.rejected == [PiiCategory.HEALTH]


SPLITS = [
    (f"my national ID starts with {NID[:5]}", f"and it ends with {NID[5:]}", PiiCategory.NATIONAL_ID),
    (f"کد ملی من با {fa(NID[:5])} شروع می‌شود", f"و با {fa(NID[5:])} تمام می‌شود", PiiCategory.NATIONAL_ID),
    (f"the first half is {NID[:5]}", f"the second half is {NID[5:]}", PiiCategory.NATIONAL_ID),
    (f"my card begins {CARD[:8]}", f"then {CARD[8:]}", PiiCategory.CARD_NUMBER),
    (f"شماره کارتم {fa(CARD[:8])}", f"ادامه‌اش {fa(CARD[8:])} است", PiiCategory.CARD_NUMBER),
    ("I have dia", "betes", PiiCategory.HEALTH),
    ("من دیا", "بت دارم", PiiCategory.HEALTH),
]


@pytest.mark.parametrize(("first", "second", "category"), SPLITS)
def test_a_value_split_over_two_messages_is_refused_when_read_together(
    first: str, second: str, category: PiiCategory
) -> None:
    assert find_pii(first) == [] and find_pii(second) == []  # each alone passes
    assert joined_rejection_reason(first, second) == category


def _benign_facts() -> list[str]:
    return [f.text for message, _ in BENIGN_FACTS for f in extract_offline(message).facts]


def test_false_refusals_on_the_benign_corpus_stay_under_two_percent() -> None:
    facts = _benign_facts()
    alone = [fact for fact in facts if find_pii(fact)]
    assert len(alone) <= len(facts) * 0.02, alone
    pairs = list(itertools.permutations(facts, 2))
    together = [pair for pair in pairs if joined_rejection_reason(*pair)]
    assert len(together) <= len(pairs) * 0.02, together[:10]


def test_invisible_characters_are_removed_not_spaced() -> None:
    assert normalize_for_pii("dia\u200bbe\u00adtes \u0443\u0435s") == "diabetes yes"
    assert normalize_for_pii("1\u034f2\ufe0f3\u28004") == "1234"


def test_short_number_words_stay_words() -> None:
    assert normalize_for_pii("I have two children and one car") == "i have two children and one car"


async def test_a_value_split_over_two_messages_leaves_nothing_in_the_store(isolated_database_url: str) -> None:
    async with running_app(isolated_database_url) as client:
        for i, (first, second, _) in enumerate(SPLITS):
            trigger = "یادت باشد " if any("\u0600" <= c <= "\u06ff" for c in first) else "remember that "
            for message in (first, second):
                await send_for_answer(client, f"split-{i}", trigger + message, user=f"split-{i}")
                await services_of(client).memory.drain(30)
        await send_for_answer(client, "ok", "remember that I live in Shiraz", user="split-ok")
        await services_of(client).memory.drain(30)
        kept = (await client.get("/v1/users/split-ok/memory", headers=auth(user="split-ok"))).json()
        left = [
            (await client.get(f"/v1/users/split-{i}/memory", headers=auth(user=f"split-{i}"))).json()["facts"]
            for i in range(len(SPLITS))
        ]
    assert [f["text"] for f in kept["facts"]] == ["I live in Shiraz"]
    assert left == [[] for _ in SPLITS]
    with psycopg.connect(isolated_database_url) as conn:
        stored = " ".join(normalize_for_pii(str(r[0])) for r in conn.execute("select value::text from store"))
    for needle in (NID[:5], NID[5:], CARD[:8], CARD[8:], "دیا", "betes"):
        assert needle not in stored


def test_the_writer_drops_both_halves_and_keeps_the_rest() -> None:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    stored = [
        StoredFact("old", "I live in Shiraz", "location", "residence", moment),
        StoredFact("half", f"my national ID starts with {NID[:5]}", "note", "note:x", moment + timedelta(seconds=1)),
    ]
    batch = [
        FactCandidate(f"and it ends with {NID[5:]}", "note", "note:y"),
        FactCandidate("I have dia", "note", "note:z"),
        FactCandidate("betes", "note", "note:w"),
        FactCandidate("my car is a Pride", "vehicle", "vehicle"),
    ]
    kept, halves = split_values(stored, batch)
    assert halves == ["half"]
    assert [f.text for f in kept] == ["my car is a Pride"]
