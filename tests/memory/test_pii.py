"""The PII guard refuses national IDs, cards, Sheba, payment secrets and health data, and little else."""

from __future__ import annotations

import itertools

import pytest

from chatbot.memory.pii import PiiCategory, find_pii, is_safe_for_memory, rejection_reason
from tests.fixtures.memory_pii_corpus import (
    BENIGN_MESSAGES,
    PII_MESSAGES,
    PII_NEEDLES,
    ar,
    contains_needle,
    fa,
    luhn_card,
    national_id,
    sheba,
)

NID = national_id("001234567")
CARD = luhn_card("603799751234567")
SHEBA = sheba("0170000000123456789001")


def test_corpus_sizes_meet_the_issue() -> None:
    assert len(PII_MESSAGES) >= 100
    assert len(PII_NEEDLES) == len(PII_MESSAGES)
    assert len(BENIGN_MESSAGES) >= 30


@pytest.mark.parametrize("message", PII_MESSAGES)
def test_every_pii_message_is_refused(message: str) -> None:
    assert find_pii(message)
    assert not is_safe_for_memory(message)


@pytest.mark.parametrize(("message", "needle"), list(zip(PII_MESSAGES, PII_NEEDLES, strict=True)))
def test_each_needle_is_in_its_message(message: str, needle: str) -> None:
    assert contains_needle(message, needle)


@pytest.mark.parametrize(("message", "fact"), BENIGN_MESSAGES)
def test_benign_messages_pass(message: str, fact: str) -> None:
    assert find_pii(message) == []
    assert is_safe_for_memory(message)


def test_no_needle_hides_in_a_benign_message() -> None:
    # An end-to-end check of the store would otherwise blame a benign fact for a leak.
    for (message, _), needle in itertools.product(BENIGN_MESSAGES, PII_NEEDLES):
        assert not contains_needle(message, needle), needle


@pytest.mark.parametrize(
    "text",
    [
        NID,
        fa(NID),
        ar(NID),
        f"{NID[:3]}-{NID[3:9]}-{NID[9]}",
        " ".join(NID),
        f"{NID[:5]}\u200c{NID[5:]}",
        f"{NID[:5]}\u00ad{NID[5:]}",
        "".join(chr(0xFF10 + int(d)) for d in NID),
    ],
)
def test_national_id_in_any_writing(text: str) -> None:
    assert find_pii(f"my id is {text}") == [PiiCategory.NATIONAL_ID]


def test_national_id_rules() -> None:
    bad_check = NID[:9] + str((int(NID[9]) + 1) % 10)
    assert find_pii(f"number {bad_check}") == []
    assert find_pii(f"national ID {bad_check}") == [PiiCategory.NATIONAL_ID]  # labelled: refused anyway
    assert find_pii("کد ملی من ۱۲۳۴۵۶۷۸ است") == [PiiCategory.NATIONAL_ID]  # leading zeros dropped
    assert find_pii("1111111111") == []  # passes the check digit, but one repeated digit
    assert find_pii("کد ملی ۰۰۰۰۰۰۰۰۰۰") == []
    assert find_pii(f"کد پستی من {NID} است") == []  # labelled as another kind of number
    assert find_pii(f"policy number {NID}") == []


def test_dates_next_to_each_other_do_not_form_an_id() -> None:
    # Find two dates whose digits, read across the space, would pass the national-ID check.
    pairs = (
        (f"1403/{m1:02d}/{d1:02d}", f"1403/{m2:02d}/{d2:02d}")
        for m1, d1, m2, d2 in itertools.product(range(1, 13), range(1, 29, 3), range(1, 13), range(1, 29, 3))
    )
    first, second = next(
        (a, b) for a, b in pairs if len(set(a[5:] + b[:7])) > 1 and is_valid_id((a[5:] + b[:7]).replace("/", ""))
    )
    assert find_pii(f"from {first} {second}") == []
    assert find_pii(f"from {fa(first)} {fa(second)}") == []


def is_valid_id(digits: str) -> bool:
    return len(digits) == 10 and national_id(digits[:9]) == digits


@pytest.mark.parametrize(
    "text",
    [
        CARD,
        " ".join(CARD[i : i + 4] for i in range(0, 16, 4)),
        "-".join(CARD[i : i + 4] for i in range(0, 16, 4)),
        fa(CARD),
        ar(" ".join(CARD[i : i + 4] for i in range(0, 16, 4))),
        f"{CARD[:8]}\u200b{CARD[8:]}",
        " - ".join(CARD[i : i + 4] for i in range(0, 16, 4)),
    ],
)
def test_card_numbers_in_any_writing(text: str) -> None:
    assert PiiCategory.CARD_NUMBER in find_pii(f"pay to {text}")


def test_card_rules() -> None:
    not_luhn = CARD[:15] + str((int(CARD[15]) + 1) % 10)
    assert find_pii(f"number {not_luhn}") == []
    assert find_pii(f"شماره کارت {fa(not_luhn)}") == [PiiCategory.CARD_NUMBER]
    assert find_pii("0000 0000 0000 0000") == []


@pytest.mark.parametrize(
    "text",
    [
        f"IR{SHEBA}",
        f"ir {SHEBA}",
        "IR" + " ".join([SHEBA[:2], *(SHEBA[i : i + 4] for i in range(2, 24, 4))]),
        f"IR{fa(SHEBA)}",
        f"شبا {ar(SHEBA)}",
        SHEBA,
        "DE89 3704 0044 0532 0130 00",
        "GB82 WEST 1234 5698 7654 32",
    ],
)
def test_sheba_and_iban(text: str) -> None:
    assert PiiCategory.IBAN in find_pii(f"account {text}")


def test_bare_24_digits_need_mod_97() -> None:
    broken = SHEBA[:23] + str((int(SHEBA[23]) + 1) % 10)
    assert PiiCategory.IBAN not in find_pii(f"reference {broken}")
    assert PiiCategory.IBAN in find_pii(f"IR{broken}")  # "IR" + 24 digits is a Sheba, typo or not


@pytest.mark.parametrize(
    "text",
    [
        "my cvv2 is 123",
        "رمز دوم کارتم",
        "رمز پویا ۱۲۳۴۵۶",
        "password: hunter2",
        "PIN 4821",
        "OTP code 123456",
        "کد تایید ۵۵۵۱۲۳",
        "کد تأیید",
        "کلمه عبور",
        "card expires 05/27",
        "تاریخ انقضای کارت ۱۴۰۵/۰۳",
        "expiry 11/26",
    ],
)
def test_payment_secrets(text: str) -> None:
    assert PiiCategory.PAYMENT_SECRET in find_pii(text)


@pytest.mark.parametrize(
    "text",
    [
        "my policy expires on 1404/01/15",
        "policy expiry 2025-03-20",
        "تاریخ انقضای بیمه‌نامه ۱۴۰۴/۰۱/۱۵ است",
        "I invest in رمزارز",
        "I was pinned down by traffic",
    ],
)
def test_expiry_and_lookalikes_without_a_card_pass(text: str) -> None:
    assert PiiCategory.PAYMENT_SECRET not in find_pii(text)


@pytest.mark.parametrize(
    "text",
    [
        "I have diabetes",
        "she is pregnant",
        "knee surgery",
        "I take metformin",
        "diagnosed with cancer",
        "ADHD",
        "high blood pressure",
        "من دیابت دارم",
        "پیش‌دیابت",
        "باردارم",
        "آسم دارم",
        "ام‌اس دارم",
        "قرص می‌خورم",
        "عمل جراحی",
        "شیمی‌درمانی",
        "شيمي درماني",
        "افسردگی",
        "بستری شدم",
        "He has AIDS",
    ],
)
def test_health_information(text: str) -> None:
    assert find_pii(text) == [PiiCategory.HEALTH]


@pytest.mark.parametrize(
    "text",
    [
        "بیمه تکمیلی",
        "بیمه درمان تکمیلی دارم",
        "supplementary health insurance",
        "my health plan",
        "medical insurance",
        "آسمان آبی",
        "I flew to مسقط",
        "بیمارستان میلاد نزدیک خانه من است",
        "ترجیح می‌دهم اس ام اس بفرستید",
        "third-party cover pays for injury to others",
        "hearing aids are covered",
        "دوره درمان",
    ],
)
def test_product_words_and_lookalikes_are_not_health(text: str) -> None:
    assert PiiCategory.HEALTH not in find_pii(text)


@pytest.mark.parametrize(
    "text",
    [
        "policy ACM-2024-00123",
        "بیمه‌نامه شماره 1403/12345",
        "پژو ۲۰۶",
        "Toyota Corolla 2019",
        "۱۴۰۳/۰۵/۱۲",
        "2024-05-12",
        "5,000,000 rials",
        "۵٬۰۰۰٬۰۰۰ ریال",
        "12 500 000 000 rials",
        "پلاک ۱۲ ب ۳۴۵ ایران ۶۷",
        "my car is 7 years old",
        "تهران",
        "call 021 8888 7777",
        "1,234,567,890 rials",
    ],
)
def test_everyday_numbers_pass(text: str) -> None:
    assert find_pii(text) == []


def test_results_carry_categories_never_values() -> None:
    text = f"card {CARD} and id {NID}"
    found = find_pii(text)
    assert found == [PiiCategory.NATIONAL_ID, PiiCategory.CARD_NUMBER]
    assert all(isinstance(c, PiiCategory) for c in found)
    assert rejection_reason(text) == PiiCategory.NATIONAL_ID
    assert str(rejection_reason(text)) == "national_id"


def test_extractor_category_decides_too() -> None:
    assert not is_safe_for_memory("I like mornings", category="health")
    assert not is_safe_for_memory("I like mornings", category="medical_condition")
    assert rejection_reason("I like mornings", category="سلامت") == PiiCategory.HEALTH
    assert is_safe_for_memory("I like mornings", category="preference")
    assert is_safe_for_memory("I like mornings")


def test_needles_are_found_however_a_number_was_stored() -> None:
    assert contains_needle(f"card {fa(CARD[:4])}-{CARD[4:8]} {CARD[8:12]}\u200c{CARD[12:]}", CARD)
    assert not contains_needle('{"a": "5510"}, {"b": "39"}', "551039")  # digits of two values
    assert contains_needle("Diabetes type 2", "diabetes")
