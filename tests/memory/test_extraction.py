"""The offline extractor finds remember-statements, profile cues and keys that make restatements meet."""

from __future__ import annotations

import pytest

from chatbot.memory.extraction import (
    DEFAULT_PRODUCTS,
    MAX_FACT_CHARS,
    MAX_LIST_ITEMS,
    MAX_TOPIC_COUNT,
    MAX_TOPICS,
    Profile,
    extract_offline,
    merge_profile,
)
from tests.fixtures.memory_pii_corpus import BENIGN_MESSAGES, PII_MESSAGES, luhn_card


def facts_of(text: str) -> list[str]:
    return [f.text for f in extract_offline(text).facts]


def key_of(text: str) -> str:
    (fact,) = extract_offline(text).facts
    return fact.key


@pytest.mark.parametrize(
    ("message", "fact"),
    [
        ("remember that I prefer email", "I prefer email"),
        ("Please remember I live in Shiraz.", "I live in Shiraz"),
        ("remember: my car is a Peugeot 206", "my car is a Peugeot 206"),
        ("Remember, my policy renews in Farvardin!", "my policy renews in Farvardin"),
        (
            "Hi there. Please remember that I travel a lot. What does travel insurance cover?",
            "I travel a lot",
        ),
        ("don't forget that I have two cars", "I have two cars"),
        ("یادت باشد من در تبریز زندگی می‌کنم", "من در تبریز زندگی می‌کنم"),
        ("یادت باشه ماشینم پراید است", "ماشینم پراید است"),
        ("به خاطر بسپار که بیمه‌نامه‌ام ثالث است.", "بیمه‌نامه‌ام ثالث است"),
        ("به‌خاطر بسپار: ترجیح می‌دهم پیامک بدهید", "ترجیح می‌دهم پیامک بدهید"),
        ("بخاطر بسپارید که ساکن کرج هستم", "ساکن کرج هستم"),
        ("يادت باشد ماشينم پژو است", "ماشينم پژو است"),  # Arabic yeh: stored as written
        ("سلام. لطفا یادتان باشد که من صبح‌ها در دسترس هستم؟ ممنون", "من صبح‌ها در دسترس هستم"),
    ],
)
def test_remember_triggers(message: str, fact: str) -> None:
    assert facts_of(message) == [fact]


def test_two_triggers_give_two_facts() -> None:
    message = "remember that I live in Yazd, and remember that I prefer phone calls"
    assert facts_of(message) == ["I live in Yazd", "I prefer phone calls"]


@pytest.mark.parametrize(
    "message",
    [
        "I don't remember my policy number",
        "Do you remember what I said?",
        "remember what my deductible is?",
        "I can't remember if it was 2019",
        "What is third party insurance?",
        "یادت هست بیمه من چی بود؟",
        "remember that",
        "یادت باشه",
    ],
)
def test_no_fact_without_a_request(message: str) -> None:
    assert facts_of(message) == []


def test_polite_question_form_is_a_request() -> None:
    assert facts_of("Could you remember that I live in Tabriz?") == ["I live in Tabriz"]


def test_only_answered_turns_yield_memory() -> None:
    for status in ("clarifying", "escalate"):
        candidates = extract_offline("remember that I live in Shiraz", status=status)
        assert candidates.facts == [] and candidates.profile_updates == {}


def test_facts_are_cut_at_300_characters_on_a_word() -> None:
    (fact,) = extract_offline("remember that " + "my garage is very far away " * 30).facts
    assert len(fact.text) <= MAX_FACT_CHARS
    assert fact.text.endswith(("away", "far", "very", "is", "garage", "my"))


def test_pii_beyond_the_cut_still_drops_the_fact() -> None:
    card = luhn_card("603799751234567")
    message = "remember that " + "x" * 290 + f" {card[:4]} {card[4:8]} {card[8:12]} {card[12:]}"
    candidates = extract_offline(message)
    assert candidates.facts == []
    assert [str(c) for c in candidates.rejected] == ["card_number"]


@pytest.mark.parametrize("message", PII_MESSAGES)
def test_pii_corpus_yields_no_fact(message: str) -> None:
    candidates = extract_offline(message)
    assert candidates.facts == []
    assert len(candidates.rejected) == 1


@pytest.mark.parametrize(("message", "fact"), BENIGN_MESSAGES)
def test_benign_corpus_is_remembered(message: str, fact: str) -> None:
    candidates = extract_offline(message)
    assert any(fact in f.text for f in candidates.facts), candidates
    assert candidates.rejected == []


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("remember that I prefer email", "remember that I prefer phone calls"),
        ("remember that I prefer email", "please remember I'd rather you call me"),
        ("یادت باشد ترجیح می‌دهم ایمیل بزنید", "یادت باشه ترجیح میدم تلفنی تماس بگیرید"),
        ("remember that my car is a Peugeot 206", "remember that my car is a Toyota"),
        ("remember that my car is a Peugeot 206", "یادت باشه ماشینم تویوتا است"),
        ("remember that I live in Shiraz", "یادت باشد من در تهران زندگی می‌کنم"),
        ("remember that my policy number is ACM-1", "یادت باشد شماره بیمه‌نامه من ۱۲۳ است"),
        ("remember that my policy expires in March", "remember that my policy renews in April"),
        ("remember that my favourite branch is Vanak", "remember that my favourite branch is Tajrish"),
        ("remember that I have a garage", "remember that I don't have a garage"),
        ("remember that blue cars are nice", "remember that nice cars are blue"),
    ],
)
def test_restatements_share_a_key(first: str, second: str) -> None:
    assert key_of(first) == key_of(second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("remember that I prefer email", "remember that I prefer mornings"),
        ("remember that my car is a Peugeot 206", "remember that I live in Shiraz"),
        ("remember that my car is a Peugeot 206", "remember that my car's plate is 12B345"),
        ("remember that my third party policy number is 1", "remember that my car body policy number is 2"),
        ("remember that I have two cars", "remember that I have three cars"),
    ],
)
def test_different_subjects_get_different_keys(first: str, second: str) -> None:
    assert key_of(first) != key_of(second)


def test_keys_carry_no_free_text() -> None:
    fact = extract_offline("remember that the blue door sticks in winter").facts[0]
    assert fact.key.startswith("note:") and "door" not in fact.key


def test_profile_language_and_formality() -> None:
    assert extract_offline("سلام، لطفا بفرمایید پوشش بیمه بدنه چیست").profile_updates["formality"] == "formal"
    assert extract_offline("سلام داداش، میخوام بدونم ثالث چقدره").profile_updates["formality"] == "informal"
    assert extract_offline("hey thx, gonna renew").profile_updates == {
        "language": "en",
        "formality": "informal",
        "topics": {"renewal": 1},
    }
    assert extract_offline("Dear team, could you kindly explain").profile_updates["formality"] == "formal"
    assert "formality" not in extract_offline("What is covered?").profile_updates
    assert extract_offline("۱۲۳۴", locale="en-US").profile_updates["language"] == "en"
    assert extract_offline("بیمه", locale="en-US").profile_updates["language"] == "fa"


@pytest.mark.parametrize(
    ("message", "products"),
    [
        ("قیمت بیمه شخص ثالث و بدنه پژو؟", ["third_party", "car_body"]),
        ("بیمه آتش‌سوزی منزل", ["home"]),
        ("بیمه آتشسوزی", ["home"]),
        ("I need travel insurance and life insurance", ["travel", "life"]),
        ("Is my supplementary health insurance enough?", ["supplementary_health"]),
        ("بیمه تکمیلی دارم", ["supplementary_health"]),
        ("اطلاعات تکمیلی و عمر ماشین", []),
        ("my lifetime travels", []),
    ],
)
def test_products_from_the_default_vocabulary(message: str, products: list[str]) -> None:
    assert extract_offline(message).profile_updates.get("products", []) == products


def test_products_from_a_tenant_vocabulary() -> None:
    vocabulary = {"cyber": ["cyber insurance", "بیمه سایبری"], **DEFAULT_PRODUCTS}
    updates = extract_offline("بیمه سایبری و ثالث", products=vocabulary).profile_updates
    assert updates["products"] == ["cyber", "third_party"]


def test_household_and_topics() -> None:
    updates = extract_offline("I'm married and we have two kids; how much is the premium to renew?").profile_updates
    assert updates["household"] == ["married", "children:2"]
    assert updates["topics"] == {"renewal": 1, "price": 1}
    assert extract_offline("من متاهل هستم و سه تا بچه دارم").profile_updates["household"] == [
        "married",
        "children:3",
    ]
    assert extract_offline("همسرم فوت کرده").profile_updates["household"] == ["widowed"]


def test_merge_profile_updates_in_place() -> None:
    old: Profile = {
        "language": "fa",
        "products": ["third_party"],
        "household": ["single", "children"],
        "topics": {"claim": 3},
    }
    new = merge_profile(
        old,
        {
            "language": "en",
            "formality": "formal",
            "products": ["car_body", "third_party"],
            "household": ["married", "children:2"],
            "topics": {"claim": 1, "price": 1},
        },
    )
    assert new == {
        "language": "en",
        "formality": "formal",
        "products": ["car_body", "third_party"],
        "household": ["married", "children:2"],
        "topics": {"claim": 4, "price": 1},
    }
    assert old["language"] == "fa" and old["topics"] == {"claim": 3}  # inputs untouched
    assert merge_profile(new, {"household": ["children"]})["household"] == ["married", "children:2"]


def test_merge_profile_is_bounded() -> None:
    profile: Profile = {}
    for i in range(100):
        profile = merge_profile(profile, {"products": [f"p{i}"], "topics": {f"t{i}": 1, "claim": 50}})
    assert profile["products"] == [f"p{i}" for i in range(100 - MAX_LIST_ITEMS, 100)]
    topics = profile["topics"]
    assert isinstance(topics, dict)
    assert len(topics) == MAX_TOPICS and topics["claim"] == MAX_TOPIC_COUNT
