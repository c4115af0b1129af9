"""Name what a remembered statement is about, so a restatement replaces the old fact.

`classify_fact` maps a statement to (category, key). Two statements with the same key are
about the same thing: "I prefer email" and "I prefer phone calls" share
`preference:contact`, "my car is a Peugeot 206" and "ماشینم تویوتا است" share `vehicle`.
The rules are subject patterns in both languages, tried in order; a statement no rule
names falls back to a hash of its content words, so only a restatement (same words in
any order, with or without a negation) collides. Hashing keeps free text out of keys,
which are meant as identifiers, not as a second copy of the statement.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

from chatbot.memory.pii import normalize_for_pii

_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")

# Function words and negations: dropped so "I have a garage" and "I don't have a garage" meet.
_STOPWORDS = frozenset(
    "a an the is are was were be been am i i'm my me mine we our us you your it its this that these those "
    "to of in on at for and or with by as from please remember also just so not no never don't dont "
    "doesn't didn't isn't aren't wasn't won't can't cannot do does did have has had will would should "
    "و در به از که را رو با این آن اون من ما است هست هستم هستیم باشد باشه یادت برای تا یک یه هم ی ای ام م "
    "ها های خود خودم شما نه".split()
)

_CONTACT = re.compile(
    r"\b(?:e-?mails?|mail|phone|calls?|called|calling|sms|texts?|texting|messages?|whatsapp|telegram"
    r"|contact(?:ed)?|ring)\b|ایمیل|تلفن|تماس|زنگ|پیامک|پیام|اس\s*ام\s*اس|واتس\s*[اآ]پ|تلگرام|ایتا|بله"
)
_LANGUAGE = re.compile(r"\b(?:english|persian|farsi|language)\b|فارسی|انگلیسی|زبان")
_TIME = re.compile(
    r"\b(?:mornings?|afternoons?|evenings?|nights?|weekends?|weekdays?|noon|[0-9]{1,2}\s*(?:am|pm))\b"
    r"|صبح|ظهر|عصر|شب|[اآ]خر\s*هفته|ساعت"
)
_PAYMENT = re.compile(
    r"\b(?:install?ments?|cash|monthly|annual(?:ly)?|yearly|card\s*to\s*card|online\s*payment)\b"
    r"|قسط|اقساط|نقد|ماهانه|سالانه|[اآ]نلاین"
)
_PREFERENCE_CLASSES = (("contact", _CONTACT), ("language", _LANGUAGE), ("time", _TIME), ("payment", _PAYMENT))

_PREFERENCE = re.compile(
    r"\b(?:i|we)\s+(?:would\s+|'d\s+)?(?:prefer|rather|like\s+to\s+be)\b|\bmy\s+(?:preferred|preference)\b"
    r"|\b(?:don't|do\s+not|never)\s+(?:call|e-?mail|text|message|contact|phone)\b"
    r"|\b(?:call|e-?mail|text|message|contact)\s+me\b|\b(?:answer|reply|respond|talk|speak)\s+(?:to\s+me\s+)?in\b"
    r"|ترجیح|بهتر\s*است|بهتره|زنگ\s*نزن|تماس\s*نگیر|(?:با\s*من|باهام)\s*تماس|پیامک\s*بد|ایمیل\s*بزن"
    r"|(?:جواب|پاسخ)\s*(?:من\s*)?را?\s*(?:به|با)\s*(?:فارسی|انگلیسی)|(?:به|با)\s*(?:فارسی|انگلیسی)\s*(?:جواب|پاسخ)"
)
_NAME = re.compile(r"\bmy\s+name\s+is\b|\bi(?:'m|\s+am)\s+called\b|اسمم|اسم\s*من|نام\s*من|نامم")
_RESIDENCE = re.compile(
    r"\b(?:i|we)\s+(?:live|lives|reside|moved|relocated)\b|\b(?:i'm|i\s+am|we're|we\s+are)\s+(?:from|based\s+in)\b"
    r"|\bmy\s+(?:home\s*town|hometown|city)\b|زندگی\s*می\s*کن|ساکن|شهرم|شهر\s*من|اهل\s+\w+\s*(?:هستم|ام)"
    r"|خانه\s*(?:ام|من|مان)|خونه\s*(?:ام|من|مون)|خونم"
)
_VEHICLE = re.compile(
    r"\bmy\s+(?:\w+\s+)?(?:car|vehicle|automobile|motorbike|motorcycle)s?\b|\bi\s+drive\b"
    r"|ماشین\s*(?:م|ام|من|مون|مان)(?!\w)|خودرو\s*(?:م|یم|ی\s*من|من|مون|مان)(?!\w)|اتومبیل\s*(?:م|ام|من)(?!\w)"
    r"|موتور\s*(?:م|ام|من)(?!\w)"
)
_VEHICLE_PARTS = (
    ("plate", re.compile(r"\bplates?\b|\blicen[cs]e\s*plate|پلاک")),
    ("color", re.compile(r"\bcolou?r\b|رنگ")),
    ("chassis", re.compile(r"\bvin\b|\bchassis\b|شاسی")),
    ("mileage", re.compile(r"\bmileage\b|\bkilomet(?:er|re)s?\b|\bkm\b|کیلومتر|کارکرد")),
    ("parking", re.compile(r"\bpark(?:ed|ing)?\b|\bgarage\b|پارکینگ|گاراژ")),
)
_POLICY = re.compile(
    r"\bpolic(?:y|ies)\b|\bcoverage\s+(?:number|no)\b|بیمه\s*نامه|شماره\s*بیمه|\bmy\s+insurance\b|بیمه\s*(?:ام|م|من)(?!\w)"
)
_POLICY_PARTS = (
    ("expiry", re.compile(r"\bexpir\w*|\brenew\w*|\bends?\b|انقضا|تمدید|سررسید|تموم|تمام")),
    ("number", re.compile(r"\bnumber\b|\bno\b|#|\bid\b|شماره")),
    ("deductible", re.compile(r"\bdeductible\b|\bexcess\b|فرانشیز")),
    ("insurer", re.compile(r"\binsurer\b|\bcompany\b|\bwith\s+[a-z]+\s+insurance\b|شرکت")),
)
_OCCUPATION = re.compile(
    r"\bi\s+work\b|\bmy\s+(?:job|occupation|profession|employer)\b|\bi(?:'m|\s+am)\s+(?:self-employed|retired)\b"
    r"|شغلم|شغل\s*من|کار\s*می\s*کنم|بازنشسته"
)
# Subjects whose value is a number that changes (an age, an address), in the first person only
# ("سن پسرم" is not the user's age): keyed as "my X is" keys them in English, so "I am 34
# years old" and "سن من ۳۵ سال است" replace "my age is 33".
_NUMBERED_SUBJECTS = (
    (
        "my:age",
        re.compile(
            r"\bmy\s+age\b|\bi(?:'m|\s+am)\s+(?:now\s+)?[0-9]+\s*(?:years?|yrs?)\s*old\b"
            r"|(?<!\w)سن\s*(?:من|م)(?!\w)|[0-9]+\s*سال\s*(?:سن\s*)?دارم|[0-9]+\s*ساله?\s*(?:هستم|ام)(?!\w)"
        ),
    ),
    (
        "my:birth_year",
        re.compile(
            r"\b(?:i\s+was|i'm|i\s+am)\s+born\b|\bmy\s+(?:year\s+of\s+birth|birth\s*year)\b"
            r"|سال\s*تولد\s*(?:من|م)(?!\w)|متولد\s*(?:سال\s*)?[0-9]+\s*(?:هستم|ام)(?!\w)"
        ),
    ),
    (
        "my:address",
        re.compile(r"\bmy\s+(?:home\s+|postal\s+)?address\b|(?<!\w)(?:[آا]درس|نشانی)\s*(?:من|م|ام)(?!\w)"),
    ),
)
_MY_X_IS = re.compile(r"\bmy\s+((?:[a-z'-]+\s+){0,2}?[a-z'-]+)\s+(?:is|are|was|were|will\s+be|has\s+been|=|:)")
_ADJECTIVES = frozenset({"new", "old", "current", "previous", "present", "actual", "main"})


def content_words(text: str) -> frozenset[str]:
    """Return the normalised content words of `text` (no function words, no negations)."""
    return frozenset(t for t in _TOKEN.findall(normalize_for_pii(text)) if t not in _STOPWORDS)


def _first_class(norm: str, classes: Sequence[tuple[str, re.Pattern[str]]], default: str) -> str:
    """Return the name of the first class whose pattern occurs in `norm`, else `default`."""
    return next((name for name, pattern in classes if pattern.search(norm)), default)


def _products_named(norm: str, products: Mapping[str, Sequence[re.Pattern[str]]]) -> list[str]:
    """Return the product keys whose surface forms occur in `norm`."""
    return [key for key, patterns in products.items() if any(p.search(norm) for p in patterns)]


def classify_fact(statement: str, products: Mapping[str, Sequence[re.Pattern[str]]] | None = None) -> tuple[str, str]:
    """Return (category, key) for a remembered statement; equal keys mean the same subject."""
    norm = re.sub(r"\s+", " ", normalize_for_pii(statement)).strip()
    if _PREFERENCE.search(norm):
        return "preference", "preference:" + _first_class(norm, _PREFERENCE_CLASSES, "general")
    if _NAME.search(norm):
        return "personal", "name"
    if _POLICY.search(norm):
        part = _first_class(norm, _POLICY_PARTS, "")
        named = _products_named(norm, products or {})
        return "policy", ":".join(["policy", *([part] if part else []), *named[:1]])
    if _VEHICLE.search(norm):
        part = _first_class(norm, _VEHICLE_PARTS, "")
        return "vehicle", f"vehicle:{part}" if part else "vehicle"
    if _RESIDENCE.search(norm):
        return "location", "residence"
    if _OCCUPATION.search(norm):
        return "personal", "occupation"
    numbered = _first_class(norm, _NUMBERED_SUBJECTS, "")
    if numbered:
        return "note", numbered
    match = _MY_X_IS.search(norm)
    if match:
        words = [w for w in match.group(1).split() if w not in _ADJECTIVES]
        if words:
            return "note", "my:" + "_".join(words)[:60]
    digest = hashlib.sha1(" ".join(sorted(content_words(norm))).encode()).hexdigest()[:16]
    return "note", "note:" + digest
