"""Words of an insurance conversation that name the same thing, in English and Persian.

A customer rarely asks in the words they stated a detail in: "the crash" was "the
accident", "the repair shop" was "the garage", "who inspected my car" was "the assessor
who came", "how much" was "the estimate", "what date" was "on March 3". Lexical search
meets such a question only through a list like this one: a question's term found here
brings the other terms of its group into the query, weighted below the question's own.
The groups are the vocabulary of motor, health, travel and home claims, written from the
domain, not from any test conversation; a group only widens a query, it never narrows it.
"""

from __future__ import annotations

from functools import cache

from chatbot.recall.terms import terms

_MONTHS_EN = "january february march april may june july august september october november december"
_MONTHS_FA = "فروردین اردیبهشت خرداد تیر مرداد شهریور مهر آبان آذر دی بهمن اسفند"
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday شنبه یکشنبه دوشنبه سهشنبه چهارشنبه پنجشنبه جمعه"

GROUPS: tuple[tuple[str, ...], ...] = (
    ("plate", "license plate", "number plate", "registration", "پلاک", "شماره پلاک"),
    (
        "garage",
        "repair shop",
        "workshop",
        "mechanic",
        "body shop",
        "bodywork",
        "repairer",
        "تعمیرگاه",
        "صافکاری",
        "مکانیک",
        "تعمیرکار",
        "جلوبندی",
    ),
    (
        "assessor",
        "adjuster",
        "loss adjuster",
        "appraiser",
        "surveyor",
        "inspector",
        "inspected",
        "inspection",
        "expert",
        "کارشناس",
        "ارزیاب",
        "بازدید",
        "کارشناسی",
        "ارزیابی",
    ),
    (
        "cost",
        "price",
        "quote",
        "quoted",
        "estimate",
        "amount",
        "charge",
        "bill",
        "fee",
        "invoice",
        "payment",
        "paid",
        "toman",
        "tomans",
        "rial",
        "هزینه",
        "قیمت",
        "مبلغ",
        "برآورد",
        "خرج",
        "پول",
        "تومان",
        "ریال",
        "صورتحساب",
        "فاکتور",
        "پرداخت",
    ),
    (
        "accident",
        "crash",
        "collision",
        "collided",
        "hit",
        "bumped",
        "rear-ended",
        "تصادف",
        "برخورد",
        "زد",
        "کوبید",
    ),
    ("date", "day", "تاریخ", "روز", *_MONTHS_EN.split(), *_MONTHS_FA.split(), *_WEEKDAYS.split()),
    (
        "hospital",
        "clinic",
        "admitted",
        "treated",
        "treatment",
        "ambulance",
        "emergency",
        "doctor",
        "surgery",
        "بیمارستان",
        "درمانگاه",
        "بستری",
        "درمان",
        "آمبولانس",
        "اورژانس",
        "دکتر",
        "پزشک",
        "جراحی",
    ),
    ("insurer", "insurance company", "insured with", "carrier", "بیمه‌گر", "شرکت بیمه"),
    (
        "claim",
        "claim number",
        "reference",
        "file number",
        "case number",
        "tracking code",
        "پرونده",
        "شماره پرونده",
        "کد پیگیری",
        "خسارت",
    ),
    ("driver", "at-fault", "other car", "other party", "راننده", "مقصر", "طرف مقابل"),
    ("policy", "policy number", "contract", "بیمه‌نامه", "قرارداد", "شماره بیمه‌نامه"),
    ("car", "vehicle", "auto", "ماشین", "خودرو", "اتومبیل"),
    ("phone", "mobile", "phone number", "تلفن", "موبایل", "شماره تماس"),
    ("address", "street", "lives", "آدرس", "نشانی", "خیابان"),
    ("flight", "airline", "trip", "travel", "پرواز", "سفر", "مسافرت"),
    ("water", "leak", "flood", "pipe", "آب", "نشت", "لوله", "سیل"),
    ("stolen", "theft", "burglary", "robbed", "سرقت", "دزدی", "دزد"),
    ("tow", "towing", "tow truck", "یدک", "امداد خودرو", "جرثقیل"),
)


@cache
def _related() -> dict[str, frozenset[str]]:
    related: dict[str, set[str]] = {}
    for group in GROUPS:
        # Phrases of one term only: the words of "rear-ended" or "claim number" alone say too little.
        members = {found[0] for phrase in group if len(found := terms(phrase)) == 1}
        for member in members:
            related.setdefault(member, set()).update(members - {member})
    return {term: frozenset(others) for term, others in related.items()}


def related_terms(found: list[str]) -> list[str]:
    """Return the terms related to `found` (by the groups above) that `found` does not hold, in a stable order.

    Only those written in the script of the term that brought them: a Persian question is
    answered by Persian turns, and the other language's words would take the query's
    bounded room (recall/terms.py, `query_weights`) from its own.
    """
    table = _related()
    present = set(found)
    out: dict[str, None] = {}
    for term in found:
        for other in sorted(table.get(term, ())):
            if other not in present and other.isascii() == term.isascii():
                out[other] = None
    return list(out)
