"""Keep the vocabularies of the offline extractor: products, formality cues, household and topics.

All patterns run on `pii.normalize_for_pii` output (casefolded, ASCII digits, Persian letters
folded, zero-width characters removed), so Persian multi-word terms allow `\\s*` between
words and "می‌خوام", "می خوام" and "میخوام" read alike.
"""

from __future__ import annotations

import re

# Canonical product keys and their surface forms. Short Persian words that also mean
# something else are only listed inside a phrase: "عمر" alone is "age" ("عمر ماشین"),
# "تکمیلی" alone is "additional" ("اطلاعات تکمیلی").
DEFAULT_PRODUCTS: dict[str, list[str]] = {
    "third_party": [
        "شخص ثالث",
        "ثالث",
        "third party",
        "third-party insurance",
        "motor liability",
        "liability insurance",
    ],
    "car_body": [
        "بیمه بدنه",
        "بدنه",
        "car body",
        "body insurance",
        "collision insurance",
        "comprehensive car insurance",
        "comprehensive insurance",
        "kasko",
    ],
    "supplementary_health": [
        "بیمه تکمیلی",
        "تکمیلی درمان",
        "درمان تکمیلی",
        "بیمه درمان",
        "supplementary health",
        "supplementary insurance",
        "health insurance",
        "health plan",
        "medical insurance",
    ],
    "travel": ["بیمه مسافرتی", "مسافرتی", "بیمه سفر", "travel insurance", "travel medical insurance"],
    "home": [
        "آتش‌سوزی",
        "آتش سوزی",
        "بیمه منزل",
        "بیمه خانه",
        "بیمه مسکن",
        "بیمه آتش",
        "home insurance",
        "house insurance",
        "homeowners insurance",
        "fire insurance",
        "property insurance",
        "contents insurance",
    ],
    "life": [
        "بیمه عمر",
        "عمر و سرمایه",
        "عمر و پس‌انداز",
        "life insurance",
        "life cover",
        "term life",
        "whole life",
    ],
}


def _cues(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


FORMAL_CUES = _cues(
    r"(?<!\w)لطفا",
    r"خواهشمند",
    r"جنابعالی",
    r"حضرتعالی",
    r"سرکار\s*عالی",
    r"بفرمایید",
    r"می\s*باشد",
    r"سپاسگزار",
    r"متشکرم",
    r"با\s*سلام",
    r"احتراما",
    r"ارادتمند",
    r"استدعا",
    r"(?<!\w)دارید",
    r"(?<!\w)هستید",
    r"\bdear\b",
    r"\bkindly\b",
    r"\bwould\s+you\b",
    r"\bcould\s+you\b",
    r"\bi\s+would\s+like\b",
    r"\bsincerely\b",
    r"\bregards\b",
    r"\bthank\s+you\b",
    r"\bgood\s+(?:morning|afternoon|evening)\b",
)
INFORMAL_CUES = _cues(
    r"یادت\s*باشه",
    r"(?<!\w)مرسی",
    r"(?<!\w)[آا]ره(?!\w)",
    r"(?<!\w)باشه(?!\w)",
    r"می\s*خوام",
    r"چطوری",
    r"داداش",
    r"عزیزم",
    r"نمی\s*دونم",
    r"(?<!\w)چیه(?!\w)",
    r"(?<!\w)بگو(?!\w)",
    r"می\s*شه(?!\w)",
    r"اوکی",
    r"(?<!\w)دمت\s*گرم",
    r"(?<!\w)ممنونم",
    r"(?<!\w)[آا]قا\s*جان",
    r"(?<!\w)رو(?!\w)",
    r"(?<!\w)یه(?!\w)",
    r"\bhey\b",
    r"\bhiya\b",
    r"\bthx\b",
    r"\bthanks\b",
    r"\bgonna\b",
    r"\bwanna\b",
    r"\byeah\b",
    r"\byep\b",
    r"\blol\b",
    r"\bpls\b",
    r"\bplz\b",
    r"\bu\b",
    r"\bur\b",
    r"\bbtw\b",
    r"\bok\b",
    r"\bcool\b",
)

_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "یک": 1,
    "یه": 1,
    "دو": 2,
    "سه": 3,
    "چهار": 4,
    "پنج": 5,
    "شش": 6,
    "هفت": 7,
    "هشت": 8,
}
_COUNT = r"(?P<count>[0-9]{1,2}|a|an|one|two|three|four|five|six|seven|eight|یک|یه|دو|سه|چهار|پنج|شش|هفت|هشت)"


def count_word(word: str | None) -> int | None:
    """Return the number a count word or 1-2 digit number names, else None."""
    if not word:
        return None
    if word.isascii() and word.isdigit():
        return int(word)
    return _NUMBER_WORDS.get(word)


MARITAL = frozenset({"married", "single", "divorced", "widowed"})

# Ordered: the first marital rule that matches wins, so "my wife passed away" is widowed.
HOUSEHOLD_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("widowed", re.compile(r"\bwidow(?:ed|er)?\b|(?<!\w)بیوه|همسرم\s*(?:فوت|درگذشت)")),
    ("divorced", re.compile(r"\bdivorced\b|طلاق\s*گرفت|(?<!\w)مطلقه|جدا\s*شده\s*ام")),
    ("single", re.compile(r"\b(?:i'm|i\s+am)\s+single\b|\bnot\s+married\b|(?<!\w)مجردم|مجرد\s*هستم")),
    (
        "married",
        re.compile(
            r"\b(?:i'm|i\s+am|we're|we\s+are)\s+(?:happily\s+)?married\b|\bmy\s+(?:wife|husband|spouse)\b"
            r"|متاهل|ازدواج\s*کرده|(?<!\w)همسرم|همسر\s*من|(?<!\w)خانمم|(?<!\w)شوهرم"
        ),
    ),
    ("children", re.compile(rf"\b(?:i|we)\s+have\s+{_COUNT}\s+(?:kids?|children|child|sons?|daughters?)\b")),
    ("children", re.compile(rf"(?<!\w){_COUNT}\s*(?:تا\s*)?(?:فرزند|بچه)")),
    ("children", re.compile(r"\bmy\s+(?:kids|children|son|daughter)\b|فرزندان\s*م|بچه\s*(?:هام|هایم)|پسرم|دخترم")),
)

TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("claim", re.compile(r"\bclaims?\b|\baccidents?\b|خسارت|تصادف")),
    ("renewal", re.compile(r"\brenew\w*|تمدید")),
    ("price", re.compile(r"\bprices?\b|\bpremiums?\b|\bcosts?\b|\bquotes?\b|\bhow\s+much\b|قیمت|هزینه|حق\s*بیمه|نرخ")),
    ("coverage", re.compile(r"\bcover(?:s|ed|age)?\b|پوشش|تعهد")),
    ("cancellation", re.compile(r"\bcancel\w*|\brefunds?\b|(?<!\w)لغو|فسخ|کنسل")),
    ("payment", re.compile(r"\bpay(?:s|ing|ment|ments)?\b|\binstal?lments?\b|پرداخت|(?<!\w)قسط|اقساط")),
    ("documents", re.compile(r"\bdocuments?\b|\bpaperwork\b|مدارک|مدرک")),
    ("complaint", re.compile(r"\bcomplain\w*|شکایت|اعتراض|نارضایتی")),
)
