"""Long insurance conversations for bench/recall.py: details that come back, small talk, topic changes.

Each conversation is a customer's thread over weeks of a claim or two: details are stated
once (the other driver's plate, the garage, the assessor, amounts, dates, numbers), in
one of several phrasings, among many filler turns (questions about cover, small talk,
other topics) and distractors (the same kind of detail about something else: the
customer's own plate, a garage they did not choose). The late questions ask about the
details in other words than they were stated in, and name the turns that answer them:
one detail, several, when something was said, and follow-ups that lean on the question
before them. Seeded, so a run is repeatable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# --- the details: (slot, values, statements, questions, noun phrase for "several" questions) ---


@dataclass(frozen=True)
class Slot:
    name: str
    values: tuple[str, ...]
    says: tuple[str, ...]  # statements, with {v}
    asks: tuple[str, ...]  # questions about it
    noun: str  # as part of a "remind me of X and Y" question
    distractors: tuple[str, ...] = ()  # the same kind of detail about something else, with {v}


EN: tuple[Slot, ...] = (
    Slot(
        "plate",
        ("52K913", "11B4477", "38D2290", "74H5561", "29M3318", "63J7720"),
        (
            "The other driver's plate was {v}.",
            "I wrote down the license plate of the car that hit me: {v}",
            "His car's plate number is {v}, in case you need it for the claim.",
        ),
        (
            "What was the other driver's plate number?",
            "Can you remind me of the license plate of the car that hit me?",
            "Which plate did I give you for the other car?",
        ),
        "the other car's plate",
        ("My own car's plate is {v}, if that matters.",),
    ),
    Slot(
        "garage",
        ("Golzar Auto", "Pars Repair Center", "Sadeghi Body Shop", "Azadi Motors", "Noor Car Service"),
        (
            "We agreed the car goes to {v} for the repairs.",
            "The repair shop I picked is {v}, near my office.",
            "OK then, {v} will fix the car, that garage is on your list.",
        ),
        (
            "Which garage did we agree on?",
            "Where is my car being repaired again?",
            "What was the name of the repair shop I chose?",
        ),
        "the garage we chose",
        ("My brother took his car to {v} last year, they were slow.",),
    ),
    Slot(
        "assessor",
        ("Farhad Rostami", "Leila Ahmadi", "Reza Kazemi", "Maryam Tavakoli", "Hossein Jafari"),
        (
            "The assessor who came to see the car was {v}.",
            "Your damage assessor, {v}, inspected the car this morning.",
            "{v} from your company did the inspection and took photos.",
        ),
        (
            "What was the assessor's name?",
            "Who inspected my car for the claim?",
            "Remind me who the damage expert was?",
        ),
        "the assessor's name",
    ),
    Slot(
        "amount",
        ("12,500,000 tomans", "8,200,000 tomans", "31,000,000 tomans", "4,750,000 tomans", "19,900,000 tomans"),
        (
            "The garage quoted {v} for the bumper and the door.",
            "The repair estimate came to {v} in total.",
            "They told me fixing everything would cost {v}.",
        ),
        (
            "How much was the repair estimate?",
            "What did the garage say the repairs would cost?",
            "How much money was the quote for fixing the car?",
        ),
        "the repair estimate",
        ("Last year's premium was {v}.",),
    ),
    Slot(
        "date",
        ("March 3", "the 14th of April", "Saturday the 9th", "June 21", "the 2nd of May"),
        (
            "The accident happened on {v} near the Azadi roundabout.",
            "It was on {v} that the other car hit me from behind.",
            "For the record, the crash was on {v}, around 6 pm.",
        ),
        (
            "On what date did the accident happen?",
            "When was the crash again?",
            "What day did the other car hit me?",
        ),
        "the accident date",
        ("My policy renewal is due on {v}.",),
    ),
    Slot(
        "claim",
        ("CLM-48213", "CLM-77102", "CLM-30958", "CLM-91544", "CLM-62017"),
        (
            "My claim number is {v}.",
            "The reference you gave me for the claim was {v}.",
            "Support said my file is registered as {v}.",
        ),
        (
            "What's my claim number?",
            "Which reference number did the claim get?",
            "Can you tell me my claim reference again?",
        ),
        "the claim number",
    ),
    Slot(
        "hospital",
        ("Milad Hospital", "Pars Hospital", "Day General Hospital", "Atieh Hospital", "Erfan Hospital"),
        (
            "I was admitted to {v} for two nights after the crash.",
            "They took me to {v} by ambulance.",
            "My neck was checked at {v}, the bill is with me.",
        ),
        (
            "Which hospital was I taken to?",
            "Where was I treated after the accident?",
            "What's the name of the hospital I stayed at?",
        ),
        "the hospital",
    ),
    Slot(
        "insurer",
        ("Asia Insurance", "Dana Insurance", "Alborz Insurance", "Parsian Insurance", "Saman Insurance"),
        (
            "The other driver is insured with {v}.",
            "His third-party cover is from {v}.",
            "The at-fault driver's insurer is {v}, he showed me the card.",
        ),
        (
            "Which company insures the other driver?",
            "Who was the at-fault driver's insurer?",
            "What insurance did the other guy have?",
        ),
        "the other driver's insurer",
    ),
)

FA: tuple[Slot, ...] = (
    Slot(
        "plate",
        ("۴۷ ط ۸۲۱ ایران ۶۶", "۱۲ ب ۳۴۵ ایران ۱۰", "۶۸ ج ۱۹۲ ایران ۲۲", "۳۳ د ۷۰۴ ایران ۴۴", "۲۵ س ۶۱۸ ایران ۷۷"),
        (
            "پلاک ماشین طرف مقابل {v} بود.",
            "شماره پلاک خودرویی که به من زد را یادداشت کردم: {v}",
            "پلاک ماشینش {v} است، اگر برای پرونده لازم است.",
        ),
        (
            "پلاک ماشین طرف مقابل چند بود؟",
            "شماره پلاک خودرویی که به من زد را یادم می‌اندازی؟",
            "چه پلاکی برای ماشین مقصر به شما دادم؟",
        ),
        "پلاک ماشین مقصر",
        ("پلاک ماشین خودم {v} است، شاید لازم شود.",),
    ),
    Slot(
        "garage",
        ("تعمیرگاه گلزار", "تعمیرگاه پارس", "صافکاری صادقی", "تعمیرگاه آزادی", "تعمیرگاه نور"),
        (
            "قرار شد ماشین را برای تعمیر ببرم {v}.",
            "تعمیرگاهی که انتخاب کردم {v} است، نزدیک محل کارم.",
            "باشه، پس {v} ماشین را درست می‌کند، جزو لیست شماست.",
        ),
        (
            "کدام تعمیرگاه را انتخاب کردیم؟",
            "ماشینم کجا تعمیر می‌شود؟",
            "اسم تعمیرگاهی که انتخاب کردم چه بود؟",
        ),
        "تعمیرگاه انتخابی",
        ("برادرم پارسال ماشینش را برد {v}، خیلی کند بودند.",),
    ),
    Slot(
        "assessor",
        ("فرهاد رستمی", "لیلا احمدی", "رضا کاظمی", "مریم توکلی", "حسین جعفری"),
        (
            "کارشناسی که برای دیدن ماشین آمد {v} بود.",
            "کارشناس خسارت شما، آقای/خانم {v}، امروز صبح ماشین را بازدید کرد.",
            "{v} از طرف شرکت بازدید را انجام داد و عکس گرفت.",
        ),
        (
            "اسم کارشناس چه بود؟",
            "چه کسی ماشینم را برای پرونده بازدید کرد؟",
            "کارشناس خسارت کی بود؟ یادم نیست.",
        ),
        "اسم کارشناس",
    ),
    Slot(
        "amount",
        ("۱۲٬۵۰۰٬۰۰۰ تومان", "۸٬۲۰۰٬۰۰۰ تومان", "۳۱٬۰۰۰٬۰۰۰ تومان", "۴٬۷۵۰٬۰۰۰ تومان", "۱۹٬۹۰۰٬۰۰۰ تومان"),
        (
            "تعمیرگاه برای سپر و در {v} قیمت داد.",
            "برآورد هزینه تعمیر در مجموع {v} شد.",
            "گفتند تعمیر همه قسمت‌ها {v} خرج دارد.",
        ),
        (
            "برآورد هزینه تعمیر چقدر بود؟",
            "تعمیرگاه گفت تعمیر چقدر خرج دارد؟",
            "مبلغ قیمتی که برای تعمیر ماشین دادند چند بود؟",
        ),
        "هزینه تعمیر",
        ("حق بیمه پارسالم {v} بود.",),
    ),
    Slot(
        "date",
        ("۱۲ اسفند", "۳ فروردین", "شنبه ۹ مهر", "۲۱ خرداد", "۲ اردیبهشت"),
        (
            "تصادف {v} نزدیک میدان آزادی اتفاق افتاد.",
            "{v} بود که ماشین طرف از پشت به من زد.",
            "برای ثبت در پرونده: تصادف {v} حدود ساعت ۶ عصر بود.",
        ),
        (
            "تصادف چه تاریخی بود؟",
            "کی تصادف کردم؟ تاریخش را بگو.",
            "چه روزی ماشین طرف به من زد؟",
        ),
        "تاریخ تصادف",
        ("تمدید بیمه‌نامه‌ام {v} است.",),
    ),
    Slot(
        "claim",
        ("CLM-48213", "CLM-77102", "CLM-30958", "CLM-91544", "CLM-62017"),
        (
            "شماره پرونده خسارتم {v} است.",
            "کد پیگیری که برای پرونده دادید {v} بود.",
            "پشتیبانی گفت پرونده‌ام با شماره {v} ثبت شده.",
        ),
        (
            "شماره پرونده‌ام چند است؟",
            "کد پیگیری پرونده خسارت چه بود؟",
            "دوباره شماره پرونده‌ام را می‌گویی؟",
        ),
        "شماره پرونده",
    ),
    Slot(
        "hospital",
        ("بیمارستان میلاد", "بیمارستان پارس", "بیمارستان دی", "بیمارستان آتیه", "بیمارستان عرفان"),
        (
            "بعد از تصادف دو شب در {v} بستری بودم.",
            "با آمبولانس من را بردند {v}.",
            "گردنم را در {v} معاینه کردند، صورتحسابش پیش من است.",
        ),
        (
            "من را به کدام بیمارستان بردند؟",
            "بعد از تصادف کجا درمان شدم؟",
            "اسم بیمارستانی که بستری بودم چه بود؟",
        ),
        "بیمارستان",
    ),
    Slot(
        "insurer",
        ("بیمه آسیا", "بیمه دانا", "بیمه البرز", "بیمه پارسیان", "بیمه سامان"),
        (
            "راننده مقصر بیمه‌اش {v} است.",
            "بیمه شخص ثالث طرف مقابل از {v} است.",
            "بیمه‌گر راننده مقصر {v} است، کارتش را نشانم داد.",
        ),
        (
            "راننده مقصر بیمه کدام شرکت است؟",
            "بیمه‌گر طرف مقابل کی بود؟",
            "طرف مقابل چه بیمه‌ای داشت؟",
        ),
        "بیمه‌گر طرف مقابل",
    ),
)

# Follow-ups: asked right after a question about the first slot, naming only "it"/"they".
FOLLOW_UPS = {
    "en": {
        ("garage", "amount"): ("And how much did they say it would cost?", "And what was their price?"),
        ("plate", "insurer"): ("And who was he insured with?", "And his insurance company?"),
        ("date", "hospital"): ("And where was I taken that day?", "And which hospital after that?"),
        ("assessor", "claim"): ("And what reference number did that file get?",),
    },
    "fa": {
        ("garage", "amount"): ("چقدر گفتند خرج دارد؟", "قیمتشان چند بود؟"),
        ("plate", "insurer"): ("بیمه‌اش کدام شرکت بود؟", "بیمه‌گرش چه بود؟"),
        ("date", "hospital"): ("آن روز من را کجا بردند؟", "بعدش کدام بیمارستان رفتم؟"),
        ("assessor", "claim"): ("شماره پرونده آن چه شد؟",),
    },
}
WHEN = {
    "en": ("When did I tell you about {n}?", "At what point did I mention {n}?"),
    "fa": ("کی درباره {n} به شما گفتم؟", "چه زمانی {n} را گفته بودم؟"),
}
SEVERAL = {
    "en": ("Can you remind me of {a} and {b}?", "I need {a} and {b} for the form, what were they?"),
    "fa": ("{a} و {b} را یادم می‌اندازی؟", "برای فرم به {a} و {b} نیاز دارم، چه بودند؟"),
}

FILLER = {
    "en": {
        "car": (
            "Is hail damage covered by the car body policy?",
            "Does third-party cover pay for the other car's repairs?",
            "What documents do I need for a car body claim?",
            "Can I choose any garage or only the ones on your list?",
            "How long does a car claim usually take?",
            "Is a police report required for a small accident?",
            "Does my no-claims discount change after this?",
        ),
        "health": (
            "Does supplementary health insurance cover dental work?",
            "What is the waiting period for maternity cover?",
            "Can I add my mother to my health plan?",
            "Are physiotherapy sessions covered?",
        ),
        "travel": (
            "Does travel insurance cover a cancelled flight?",
            "Is COVID treatment covered abroad?",
            "How do I get a travel insurance certificate for the visa?",
        ),
        "home": (
            "Does home insurance cover water damage from the neighbour's flat?",
            "Is earthquake cover included in the basic home policy?",
            "How is the value of my furniture assessed?",
        ),
        "small": (
            "Thanks, that helps a lot.",
            "Good morning!",
            "OK, got it.",
            "Sorry, I was busy, I'm back now.",
            "Hmm, let me think about it.",
            "You've been very helpful today.",
            "Hello again.",
            "Sure, one more thing.",
        ),
    },
    "fa": {
        "car": (
            "آیا خسارت تگرگ در بیمه بدنه پوشش دارد؟",
            "بیمه شخص ثالث هزینه تعمیر ماشین طرف مقابل را می‌دهد؟",
            "برای خسارت بدنه چه مدارکی لازم است؟",
            "می‌توانم هر تعمیرگاهی بروم یا فقط تعمیرگاه‌های طرف قرارداد؟",
            "رسیدگی به خسارت خودرو معمولا چقدر طول می‌کشد؟",
            "برای تصادف کوچک گزارش پلیس لازم است؟",
            "تخفیف عدم خسارتم بعد از این تغییر می‌کند؟",
        ),
        "health": (
            "بیمه تکمیلی هزینه دندانپزشکی را پوشش می‌دهد؟",
            "دوره انتظار زایمان چقدر است؟",
            "می‌توانم مادرم را به بیمه درمانم اضافه کنم؟",
            "جلسات فیزیوتراپی پوشش دارد؟",
        ),
        "travel": (
            "بیمه مسافرتی لغو پرواز را پوشش می‌دهد؟",
            "درمان کرونا در خارج از کشور پوشش دارد؟",
            "گواهی بیمه مسافرتی برای ویزا را چطور بگیرم؟",
        ),
        "home": (
            "بیمه خانه خسارت آب از واحد همسایه را می‌دهد؟",
            "پوشش زلزله در بیمه پایه خانه هست؟",
            "ارزش اثاثیه خانه چطور برآورد می‌شود؟",
        ),
        "small": (
            "ممنون، خیلی کمک کرد.",
            "صبح بخیر!",
            "باشه، متوجه شدم.",
            "ببخشید سرم شلوغ بود، برگشتم.",
            "اوم، بگذارید فکر کنم.",
            "امروز خیلی کمکم کردید.",
            "سلام دوباره.",
            "حتما، یک سوال دیگر.",
        ),
    },
}
SLOTS = {"en": EN, "fa": FA}
LOCALES = {"en": "en-US", "fa": "fa-IR"}


@dataclass
class Question:
    """A late question and the 0-based turns (user messages) that answer it."""

    kind: str  # "single", "several", "when", "follow-up"
    text: str
    needed: list[int]
    values: list[str] = field(default_factory=list)  # what a summary or memory would have to keep


@dataclass
class Conversation:
    language: str
    turns: list[str]  # the user's messages, in order
    questions: list[Question]


def conversation(seed: int, language: str, length: int, questions: int = 10) -> Conversation:
    """Return one conversation of `length` user turns, with `questions` late questions (several kinds)."""
    rng = random.Random(seed)
    slots = list(SLOTS[language])
    rng.shuffle(slots)
    turns = _filler(rng, language, length)
    stated: dict[str, tuple[int, str]] = {}
    # Details land anywhere but the last stretch (the recent window would hold those anyway).
    places = rng.sample(range(2, int(length * 0.85)), len(slots) + 4)
    for slot, place in zip(slots, places, strict=False):
        value = rng.choice(slot.values)
        turns[place] = rng.choice(slot.says).format(v=value)
        stated[slot.name] = (place, value)
    for place in places[len(slots) :]:  # distractors: the same kind of detail about something else
        slot = rng.choice([s for s in slots if s.distractors])
        value = rng.choice([v for v in slot.values if v != stated[slot.name][1]])
        turns[place] = rng.choice(slot.distractors).format(v=value)
    return Conversation(language, turns, _questions(rng, language, stated, slots, questions))


def _filler(rng: random.Random, language: str, length: int) -> list[str]:
    pools = FILLER[language]
    topics = [t for t in pools if t != "small"]
    turns: list[str] = []
    topic = rng.choice(topics)
    while len(turns) < length:
        if rng.random() < 0.08:  # a topic change
            topic = rng.choice(topics)
        pool = pools["small"] if rng.random() < 0.35 else pools[topic]
        turns.append(rng.choice(pool))
    return turns


def _questions(
    rng: random.Random, language: str, stated: dict[str, tuple[int, str]], slots: list[Slot], count: int
) -> list[Question]:
    by_name = {s.name: s for s in slots}
    out: list[Question] = []
    kinds = ["single", "several", "when", "follow-up"]
    while len(out) < count:
        kind = kinds[len(out) % len(kinds)]
        if kind == "single":
            slot = rng.choice(slots)
            out.append(Question(kind, rng.choice(slot.asks), [stated[slot.name][0]], [stated[slot.name][1]]))
        elif kind == "several":
            a, b = rng.sample(slots, 2)
            text = rng.choice(SEVERAL[language]).format(a=a.noun, b=b.noun)
            out.append(
                Question(
                    kind,
                    text,
                    [stated[a.name][0], stated[b.name][0]],
                    [stated[a.name][1], stated[b.name][1]],
                )
            )
        elif kind == "when":
            slot = rng.choice(slots)
            text = rng.choice(WHEN[language]).format(n=slot.noun)
            out.append(Question(kind, text, [stated[slot.name][0]], [stated[slot.name][1]]))
        else:
            (first, then), phrasings = rng.choice(list(FOLLOW_UPS[language].items()))
            lead = by_name[first]
            # The lead question is asked (and counted) first, then the follow-up that leans on it.
            out.append(Question("single", rng.choice(lead.asks), [stated[first][0]], [stated[first][1]]))
            out.append(Question(kind, rng.choice(phrasings), [stated[then][0]], [stated[then][1]]))
    return out[:count]
