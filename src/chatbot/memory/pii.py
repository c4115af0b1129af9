"""Refuse memory candidates that carry personal data the store must never hold.

The guard runs in front of every store write. It recognises Iranian national IDs (کد ملی),
bank card numbers, Sheba/IBAN numbers, payment secrets (CVV2, PIN, passwords, one-time
codes, card expiry) and health information, in Persian and English. It answers with
categories only: the matched value is never returned, logged or put in an exception,
because the guard's own output ends up in metrics and logs.

Decisions worth knowing:
- One normalisation before every decision (`normalize_for_pii`): NFKC; every
  default-ignorable or invisible code point removed, never turned into a space
  ("dia\u200bbetes" is "diabetes", U+034F or U+E0020 between digits join them); combining
  marks stripped (from digits too); every Unicode decimal digit as ASCII; lookalike letters
  folded (Cyrillic, Greek, small capitals; Arabic letter variants as Persian ones; fullwidth
  and mathematical alphanumerics are NFKC's); spelled-out digits read as digits when a run of
  them makes a number of six digits or more ("zero zero one two …", "صفر صفر یک دو …");
  letters written one by one joined ("d i a b e t e s"). The Persian zero-width non-joiner,
  which also ends a prefix ("پیش\u200cدیابت"), is read as a space too for the health terms.
- Digit groups joined by any run of up to eight separators (spaces, dashes, dots, slashes,
  commas, plus signs, mixed) form one number: "6037-9975 1234.5678" and "001,234,5679" are
  single numbers. Dates (1403/05/12, 2025-03-20) and amounts grouped in thousands
  (5,000,000) are walled off first, so two dates side by side are not one 10-digit number.
- A value split over two messages passes in each; `joined_rejection_reason` reads two texts
  together (the memory writer asks it about each new fact after the user's recent facts).
- A label right before a number decides how it is read. After "کد ملی" / "national ID" an
  8 to 10 digit number is a national ID even when its check digit fails (a mistyped ID
  still identifies a person; codes with leading zeros are often written without them).
  Unlabelled, only a 10-digit number with a valid check digit counts, and never one of a
  single repeated digit. After a label naming another kind of number (policy, plate,
  postal code, phone, claim...) the checksum-only rules are skipped, so a 10-digit postal
  code or policy number that happens to pass the check is not refused.
- "IR" followed by 24 digits is refused whatever its checksum; bare 24-digit numbers and
  other countries' IBANs are refused when mod 97 holds.
- The guard reads at most MAX_CHECKED_CHARS characters, before and after normalisation.
  NFKC turns some single characters into many (U+FDFA into 18), so a legal 8,000-character
  message could otherwise become 144,000 characters for every pattern here, on the event
  loop. Text longer than that is not checked and so is refused (UNCHECKED): nothing is
  ever stored unchecked.
- Health-insurance product words ("بیمه تکمیلی", "health plan") are not health information;
  conditions, medications, diagnoses, pregnancy and procedures are (see _pii_terms.py).
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterator
from enum import StrEnum

from chatbot.memory._pii_terms import (
    EXPIRY_PATTERN,
    HEALTH_ACRONYMS_PATTERN,
    HEALTH_CATEGORY_WORDS,
    HEALTH_PATTERN,
    SECRET_PATTERN,
)
from chatbot.text import fold_all_digits, normalize_persian


class PiiCategory(StrEnum):
    """Kinds of personal data the memory store refuses (values double as metric labels)."""

    NATIONAL_ID = "national_id"
    CARD_NUMBER = "card_number"
    IBAN = "iban"
    PAYMENT_SECRET = "payment_secret"
    HEALTH = "health"
    UNCHECKED = "unchecked"
    """Longer than the guard reads once normalised: refused because it cannot be shown safe."""


# Default-ignorable and invisible code points: a user (or a copy-paste) can put them inside a
# number or a word without changing what it shows, so they are removed, never turned into a
# space (a space would split "dia\u200bbetes" into two words no rule knows). Soft hyphen,
# combining grapheme joiner, Arabic letter mark, Hangul fillers, Mongolian and variation
# selectors, zero-width and bidi controls, word joiner and invisible operators, Braille blank,
# BOM, interlinear annotations, shorthand format controls, musical format controls, tags;
# tatweel too (a stretched letter is the same letter).
_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u0640\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]+"
)
# Combining marks (Latin, Cyrillic, symbol and half marks, the keycap): on a digit they hide it
# from `[0-9]`, on a letter they hide a word; Arabic marks go in `normalize_persian`.
_COMBINING = re.compile("[\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
# Letters that look like Latin ones (Cyrillic, Greek, small capitals) and Arabic-script letter
# variants that read as Persian ones: folded, so "dіabetes" with a Cyrillic і is "diabetes".
# Fullwidth and mathematical alphanumerics are NFKC's.
_CONFUSABLES = str.maketrans(
    {
        **dict(zip("аеорсухіјѕԁһӏԛԝкмтнвгпьӕ", "aeopcyxijsdhlqwkmthbrnbæ", strict=True)),
        **dict(zip("αοριειβγκνυτχωηςμ", "aopieibykvutxwnsu", strict=True)),
        **dict(zip("ᴀʙᴄᴅᴇғɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢ", "abcdefghijklmnoprstuvwyz", strict=True)),
        **dict.fromkeys("ٱٲٳٵ", "ا"),
        **dict.fromkeys("ۍێېۑےۓ", "ی"),
        **dict.fromkeys("ػؼڪګڬڭڮ", "ک"),
        **dict.fromkeys("ھہۂۃە", "ه"),
        **dict.fromkeys("ٶٷۄۅۆۇۈۉۊۋؤ", "و"),
    }
)
# Digits spelled as words, English and Persian. Only a run of them that makes a long number
# is read as digits ("one two three four five six …"), so "two children" stays words.
_NUMBER_WORD_VALUES = {
    **{w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine".split())},
    **{w: str(i) for i, w in enumerate("صفر یک دو سه چهار پنج شش هفت هشت نه".split())},
    "شیش": "6",
    "oh": "0",
}
_NUMBER_WORD = "|".join(sorted(_NUMBER_WORD_VALUES, key=len, reverse=True))
# Possessive, and a digit group only from its first digit: a run of digits is never retried
# from each of its positions (which made 4,000 digits cost a second).
_NUMBER_TOKEN = rf"(?:(?<![^\W\d_])(?:{_NUMBER_WORD})(?![^\W\d_])|(?<![0-9])[0-9]++)"
_NUMBER_WORD_RUN = re.compile(rf"{_NUMBER_TOKEN}(?:[\s,،\-./+_]++{_NUMBER_TOKEN})+")
_NUMBER_WORD_ONLY = re.compile(rf"(?<![^\W\d_])(?:{_NUMBER_WORD})(?![^\W\d_])")
_WORDS_MAKE_A_NUMBER = 6  # digits in a run with number words in it before it counts as one number
# Letters written one by one ("d i a b e t e s", "d-i-a-b-e-t-e-s"): at least four, joined.
_SPACED_LETTERS = re.compile(r"(?<![^\W\d_])[^\W\d_](?:[\s.\-_*·]{1,2}[^\W\d_](?![^\W\d_])){3,}")
_LETTER_SEPARATORS = re.compile(r"[\s.\-_*·]+")

# Separators people put between digit groups, mixed as they like: spaces, dashes, dots,
# slashes, commas, plus signs. A date (1403/05/12) or an amount grouped in thousands
# (5,000,000) is never part of an ID or a card: `_barriers` keeps its digits apart.
_SEP_CLASS = r"[\s\-\u2010-\u2015\u2212._/\\|\u066b\u00b7,\u060c\u066c+*~]"
_RUN = re.compile(rf"(?<![0-9])[0-9]+(?:{_SEP_CLASS}{{1,8}}[0-9]+)*")
_GROUP = re.compile("[0-9]+")
_DATE = re.compile(
    r"(?<![0-9])(?:1[34][0-9]{2}|20[0-9]{2}|19[0-9]{2})[/\-.](?:0?[1-9]|1[0-2])[/\-.](?:0?[1-9]|[12][0-9]|3[01])(?![0-9])"
    r"|(?<![0-9])(?:0?[1-9]|[12][0-9]|3[01])[/\-.](?:0?[1-9]|1[0-2])[/\-.](?:1[34][0-9]{2}|20[0-9]{2}|19[0-9]{2})(?![0-9])"
)
_AMOUNT = re.compile(r"(?<![0-9])[0-9]{1,3}(?:[,\u066c][0-9]{3})+(?![0-9,\u066c])")
_BARRIER = "\x00"
# The window lengths that can be a finding, by the label before the window (see `_is_national_id`,
# `_is_card`, `_is_bare_sheba`): unlabelled, only a checksummed 10-digit ID, a 16-digit card
# and a 24-digit Sheba (the longest number looked for); a label widens its own kind; after
# another kind's label, nothing.
# Windows of other lengths are never built: a digit-and-dot message has a window per group
# and length, and building the ones no rule reads was most of the guard's cost.
_UNLABELLED_LENGTHS = frozenset({10, 16, 24})
_LENGTHS_BY_LABEL: dict[str | None, frozenset[int]] = {
    None: _UNLABELLED_LENGTHS,
    "nid": frozenset({8, 9, 10, 16, 24}),
    "card": frozenset({10, 15, 16, 17, 18, 19, 24}),
    "iban": _UNLABELLED_LENGTHS,
    "other": frozenset(),
}
_SHEBA_LENGTH = frozenset({24})

# Labels, one alternation so a longer label ("national ID card") is one match and its
# "card" is not read as a bank-card label.
_LABELS = re.compile(
    r"(?P<nid>کد\s*ملی|شماره\s*ملی|کارت\s*ملی|شناسه\s*ملی"
    r"|national\s*(?:id(?:entity|entification)?|code|number)(?:\s*(?:card|code|number|no))*"
    r"|(?:melli|meli)\s*code|code\s*(?:melli|meli))"
    r"|(?P<iban>شبا|\bsheba\b|\bshaba\b|\biban\b)"
    r"|(?P<card>شماره\s*کارت|(?<!\w)کارت(?!\s*(?:ملی|ماشین|خودرو|سوخت))|\bcard\b)"
    r"|(?P<other>بیمه\s*نامه|\bpolicy\b|پلاک|\bplates?\b|تلفن|موبایل|\bphone\b|\bmobile\b|\bclaims?\b"
    r"|خسارت|پرونده|کد\s*پستی|\bpostal\b|\bzip\b|رهگیری|پیگیری|\btracking\b|\breference\b|\bref\b"
    r"|قرارداد|\bcontract\b|\binvoice\b|فاکتور|شاسی|\bvin\b|\bchassis\b|موتور|\bengine\b|\border\b|سفارش)"
)
_LABEL_REACH = 60  # characters between a label's end and the number it names

_IR_PREFIX = re.compile(rf"(?<![a-z])ir{_SEP_CLASS}{{0,3}}:?{_SEP_CLASS}{{0,3}}(?=[0-9])")
# Other countries' IBANs: two letters and two check digits, then the BBAN written in groups
# separated by single spaces or dashes. A chain of such groups is matched once, possessively
# (no backtracking), and cut into candidates in `_iban_candidates`. The earlier one-regex
# form, `[a-z]{2}[0-9]{2}(?:[ \-]?[a-z0-9]{1,4}){3,8}(?![a-z0-9])`, tried every way of cutting
# a long word into groups: ~1.5 ms a word, 0.45 s for an 8,000-character message of them.
# ISO 13616 reads a letter as its position plus 9 (a=10 ... z=35); translate() does it in one pass.
_IBAN_LETTER_VALUES = str.maketrans({c: str(10 + i) for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")})
_IBAN_CHAIN = re.compile(r"(?<![a-z0-9])[a-z0-9]++(?:[ \-][a-z0-9]++)*+")
_IBAN_START = re.compile(r"[a-z]{2}[0-9]{2}")
_SEPARATOR = re.compile(r"[ \-]")
_IBAN_MIN_GROUPS, _IBAN_MAX_GROUPS, _IBAN_GROUP_CHARS = 3, 8, 4


# A quarter more than the longest message the API takes (8,000): ordinary text keeps about
# its length under NFKC (an ellipsis or a ligature grows by a character or two), so only text
# built from expanding characters comes near it. The guard's cost is linear in what it reads
# (about 8 µs a character at worst, for digit-and-dot soup, where every digit starts number
# windows), and this bounds it per text: eight such messages at once must not hold the event
# loop for much over a second (tests/hardening/test_expanding_text.py; bench/worst_case_text.py).
MAX_CHECKED_CHARS = 10_000


def normalize_for_pii(text: str, *, limit: int | None = None) -> str:
    """Return the casefolded, digit-folded, invisible-free form of `text` the guard matches on.

    With `limit`, only the first `limit + 1` characters of the NFKC form are folded and at
    most `limit + 1` come back: enough to tell that the text was longer, without paying
    for the folding of an expansion nobody will read.
    """
    nfkc = unicodedata.normalize("NFKC", text)
    if limit is not None:
        return _fold_for_pii(nfkc[: limit + 1])[: limit + 1]
    return _fold_for_pii(nfkc)


def _fold_for_pii(nfkc: str) -> str:
    """Return the guard's form of NFKC text, the one every PII decision reads.

    Invisibles removed, combining marks stripped, every decimal digit ASCII, lookalike letters
    folded, Persian folded, casefolded, spelled-out digit runs as digits, letters written one
    by one joined. Each step is one C-level pass (or a regex over runs), so the form costs
    time linear in the text.
    """
    text = _IGNORABLE.sub("", nfkc)
    text = _COMBINING.sub("", text)
    text = fold_all_digits(text)
    text = normalize_persian(text.translate(_CONFUSABLES)).casefold().translate(_CONFUSABLES)
    text = _NUMBER_WORD_RUN.sub(_digits_of_number_words, text)
    return _SPACED_LETTERS.sub(lambda m: _LETTER_SEPARATORS.sub("", m.group()), text)


def _digits_of_number_words(run: re.Match[str]) -> str:
    """Return a run of number words and digits as digits when it makes a long number, else unchanged."""
    words = _NUMBER_WORD_ONLY.findall(run.group())
    if not words:
        return run.group()
    as_digits = _NUMBER_WORD_ONLY.sub(lambda m: _NUMBER_WORD_VALUES[m.group()], run.group())
    return as_digits if sum(c.isdigit() for c in as_digits) >= _WORDS_MAKE_A_NUMBER else run.group()


def _windows(run: str, offset: int, lengths: Callable[[int], frozenset[int]]) -> Iterator[tuple[str, int]]:
    """Yield (digits, start) for the runs of whole digit groups, whatever separators join them.

    `lengths(start)` names the digit counts wanted for windows starting at `start` (an
    offset in the text). At most 24 digits per window, so the cost is linear in the run (a
    bounded number of windows per group); digits are sliced out of one joined string, not
    re-joined per window.
    """
    matches = list(_GROUP.finditer(run))
    digits = "".join(m.group() for m in matches)
    ends = list(itertools.accumulate(m.end() - m.start() for m in matches))
    last = len(matches) - 1
    for i, first in enumerate(matches):
        start = offset + first.start()
        wanted = lengths(start)
        if not wanted:
            continue
        begin = ends[i - 1] if i else 0
        # A window ends where the digit count so far is exactly a wanted length: found by
        # bisection, so a start costs one step per wanted length, not one per group in reach.
        for length in sorted(wanted):
            j = bisect.bisect_left(ends, begin + length, i, last + 1)
            if j <= last and ends[j] == begin + length:
                yield digits[begin : ends[j]], start


def _label_before(labels: list[tuple[int, str]], label_ends: list[int], start: int) -> str | None:
    """Return the kind of the nearest label ending within reach before `start`.

    Labels do not overlap, so their ends ascend: a binary search finds the nearest one
    (a scan from the first label made a message of many labelled numbers quadratic).
    """
    i = bisect.bisect_right(label_ends, start) - 1
    if i < 0 or start - label_ends[i] > _LABEL_REACH:
        return None
    return labels[i][1]


def _national_id_checksum_ok(digits: str) -> bool:
    """Check an Iranian national ID's check digit (weights 10..2, mod 11)."""
    total = sum(int(d) * (10 - i) for i, d in enumerate(digits[:9]))
    remainder = total % 11
    check = int(digits[9])
    return check == remainder if remainder < 2 else check == 11 - remainder


# Luhn doubles every second digit from the right and adds the digits of the product.
_LUHN_DOUBLED = str.maketrans("0123456789", "0246813579")


def _luhn_ok(digits: str) -> bool:
    """Check a card number's Luhn digit."""
    kept, doubled = digits[::-2], digits[-2::-2].translate(_LUHN_DOUBLED)
    return (sum(map(int, kept)) + sum(map(int, doubled))) % 10 == 0


def _iban_ok(compact: str) -> bool:
    """Check an IBAN (country letters, check digits, BBAN) with ISO 13616 mod 97."""
    moved = compact[4:] + compact[:4]
    return int(moved.translate(_IBAN_LETTER_VALUES)) % 97 == 1


def _is_labelled_number(
    digits: str, label: str | None, own: str, labelled: range, bare: int, checksum_ok: Callable[[str], bool]
) -> bool:
    """Decide whether a digit window is a number of one kind: any length in `labelled` after its
    own label (`own`), else exactly `bare` digits that pass its checksum; never after another
    kind's label, never one digit repeated."""
    if label == "other" or len(set(digits)) == 1:
        return False
    if label == own and len(digits) in labelled:
        return True
    return len(digits) == bare and checksum_ok(digits)


def _is_national_id(digits: str, label: str | None) -> bool:
    """Decide whether a digit window is a national ID (see the module docstring)."""
    return _is_labelled_number(digits, label, "nid", range(8, 11), 10, _national_id_checksum_ok)


def _is_card(digits: str, label: str | None) -> bool:
    """Decide whether a digit window is a bank card number."""
    return _is_labelled_number(digits, label, "card", range(15, 20), 16, _luhn_ok)


def _is_bare_sheba(digits: str, label: str | None) -> bool:
    """Decide whether 24 digits written without "IR" are a Sheba number."""
    if len(digits) != 24 or label == "other":
        return False
    return label == "iban" or _iban_ok("ir" + digits)


def _number_categories(norm: str) -> set[PiiCategory]:
    """Find national IDs, card numbers and Sheba/IBAN numbers in normalised text."""
    found: set[PiiCategory] = set()
    labels = [(m.end(), m.lastgroup or "") for m in _LABELS.finditer(norm)]
    label_ends = [end for end, _ in labels]

    def lengths(start: int) -> frozenset[int]:
        return _LENGTHS_BY_LABEL.get(_label_before(labels, label_ends, start), _UNLABELLED_LENGTHS)

    for run in _RUN.finditer(_barriers(norm)):
        label_start, label = -1, None
        for digits, start in _windows(run.group(), run.start(), lengths):
            if start != label_start:
                label_start, label = start, _label_before(labels, label_ends, start)
            # Each rule is asked only about its own lengths, and a category already found
            # needs no second proof: the answer is the same set.
            size = len(digits)
            if size <= 10 and PiiCategory.NATIONAL_ID not in found and _is_national_id(digits, label):
                found.add(PiiCategory.NATIONAL_ID)
            elif 15 <= size <= 19 and PiiCategory.CARD_NUMBER not in found and _is_card(digits, label):
                found.add(PiiCategory.CARD_NUMBER)
            elif size == 24 and PiiCategory.IBAN not in found and _is_bare_sheba(digits, label):
                found.add(PiiCategory.IBAN)
    for prefix in _IR_PREFIX.finditer(norm):
        if PiiCategory.IBAN in found:
            break
        digits_after = _RUN.match(norm, prefix.end())
        if digits_after and _opens_with_24_digits(digits_after):
            found.add(PiiCategory.IBAN)
    if any(_iban_ok(compact) for compact in _iban_candidates(norm)):
        found.add(PiiCategory.IBAN)
    return found


def _barriers(norm: str) -> str:
    """Return `norm` with dates and thousands-grouped amounts walled off, at the same length.

    Any separators may join digit groups, so two dates side by side ("1403/05/12 1403/06/12")
    or an amount beside another number would otherwise read as one long number.
    """
    norm = _DATE.sub(lambda m: _BARRIER * len(m.group()), norm)
    return _AMOUNT.sub(lambda m: m.group().replace(",", _BARRIER).replace("\u066c", _BARRIER), norm)


def _opens_with_24_digits(run: re.Match[str]) -> bool:
    """Return True when a digit run (the one after an "IR") starts with a window of exactly 24 digits."""
    first = run.start()

    def lengths(start: int) -> frozenset[int]:
        return _SHEBA_LENGTH if start == first else frozenset()

    return any(True for _ in _windows(run.group(), first, lengths))


def _iban_candidates(norm: str) -> Iterator[str]:
    """Yield the compact forms (15 to 34 characters) that could be an IBAN written in `norm`.

    A candidate starts a word with two letters and two digits; its BBAN is 3 to 8 groups of
    1 to 4 letters or digits, with at most one space or dash between groups, and it ends at
    the end of a word. From every start the longest such run of words is taken and each
    word-aligned prefix of it is a candidate (a short word after the number may have been
    swallowed). Every start is tried, also inside another start's run, so a short
    IBAN-shaped word written just before a real IBAN ("ab12 DE89 3704 ...") cannot hide it.
    Linear in the text: a run spans at most 9 words.
    """
    for chain in _IBAN_CHAIN.finditer(norm):
        words = _SEPARATOR.split(chain.group())
        for i in range(len(words)):
            taken = _longest_iban_run(words, i)
            for n in range(taken, 0, -1):
                compact = "".join(words[i : i + n])
                if 15 <= len(compact) <= 34:
                    yield compact


def _longest_iban_run(words: list[str], i: int) -> int:
    """Return how many words from `words[i]` on form the longest IBAN-shaped run (0: none)."""
    if not _IBAN_START.match(words[i]):
        return 0
    # Each word after the 4-character start needs ceil(len / 4) groups; a run fits when its
    # words need at most 8 groups and hold at least 3 characters (3 groups of one).
    groups = chars = taken = best = 0
    for j in range(i, len(words)):
        body = len(words[j]) - 4 if j == i else len(words[j])
        groups += -(-body // _IBAN_GROUP_CHARS)
        chars += body
        if groups > _IBAN_MAX_GROUPS:
            break
        taken += 1
        if chars >= _IBAN_MIN_GROUPS:
            best = taken
    return best


_EXPIRY_VALUE = re.compile(
    r"(?<![0-9/])(?:0[1-9]|1[0-2])\s*/\s*[0-9]{2}(?![0-9/])"  # MM/YY
    r"|(?<![0-9/])(?:1[34])?[0-9]{2}\s*/\s*(?:0[1-9]|1[0-2])(?![0-9/])"  # (13|14)YY/MM on Iranian cards
)


def _has_payment_secret(norm: str, card_context: bool) -> bool:
    """Find CVV2, PIN, password or one-time-code context, or a card expiry."""
    if SECRET_PATTERN.search(norm):
        return True
    for match in EXPIRY_PATTERN.finditer(norm):
        # "My policy expires on 1404/01/15" is a fact worth keeping; an expiry is a card secret
        # only next to a card, or written as a card writes it (MM/YY, YYYY/MM).
        if card_context or _EXPIRY_VALUE.search(norm, match.end(), match.end() + 40):
            return True
    return False


def _has_health(norm: str, nfkc: str) -> bool:
    """Find health information: conditions, medications, diagnoses, procedures, pregnancy.

    The zero-width non-joiner is removed like every invisible character ("دیا\u200cبت" is
    "دیابت"), yet in Persian it also ends a prefix ("پیش\u200cدیابت"): where the text has
    one, the form with it read as a space is searched too.
    """
    if HEALTH_PATTERN.search(norm) or HEALTH_ACRONYMS_PATTERN.search(nfkc):
        return True
    return "\u200c" in nfkc and HEALTH_PATTERN.search(_fold_for_pii(nfkc.replace("\u200c", " "))) is not None


def _checkable_forms(text: str) -> tuple[str, str] | None:
    """Return the NFKC and guard forms of `text`, or None when either is longer than the guard reads."""
    if len(text) > MAX_CHECKED_CHARS:
        return None
    nfkc = unicodedata.normalize("NFKC", text)
    if len(nfkc) > MAX_CHECKED_CHARS:
        return None
    norm = _fold_for_pii(nfkc)
    # Casefolding can lengthen too ("ΐ" becomes three characters).
    return (nfkc, norm) if len(norm) <= MAX_CHECKED_CHARS else None


def checkable_form(text: str) -> str | None:
    """Return the form of `text` the guard matches on, or None when it is longer than the guard reads."""
    forms = _checkable_forms(text)
    return None if forms is None else forms[1]


def find_pii(text: str) -> list[PiiCategory]:
    """Return the PII categories present in `text`, in enum order, never the values.

    Text longer than the guard reads (MAX_CHECKED_CHARS, before or after normalisation) is
    [UNCHECKED] and nothing else: the caller refuses it like any other finding.
    """
    forms = _checkable_forms(text)
    if forms is None:
        return [PiiCategory.UNCHECKED]
    nfkc, norm = forms
    found = _number_categories(norm)
    card_context = PiiCategory.CARD_NUMBER in found or any(m.lastgroup == "card" for m in _LABELS.finditer(norm))
    if _has_payment_secret(norm, card_context):
        found.add(PiiCategory.PAYMENT_SECRET)
    if _has_health(norm, nfkc):
        found.add(PiiCategory.HEALTH)
    return [category for category in PiiCategory if category in found]


def is_health_category(category: str | None) -> bool:
    """Return True when an extractor's category names health information."""
    if not category:
        return False
    words = set(re.findall(r"[^\W_]+", normalize_persian(category).casefold()))
    return bool(words & HEALTH_CATEGORY_WORDS)


def rejection_reason(text: str, *, category: str | None = None) -> PiiCategory | None:
    """Return the first reason to refuse storing `text` (a category, never a value), or None."""
    if is_health_category(category):
        return PiiCategory.HEALTH
    found = find_pii(text)
    return found[0] if found else None


def _loose_digits(norm: str) -> str:
    """Return the digit groups of guard-form text, space-separated, leaving dates and amounts out."""
    masked = _DATE.sub(lambda m: _BARRIER * len(m.group()), norm)
    masked = _AMOUNT.sub(lambda m: _BARRIER * len(m.group()), masked)
    return " ".join(_GROUP.findall(masked))


def _number_label(norm: str) -> str | None:
    """Return the last label naming a national ID, card or Sheba in `norm`; "" when another kind's label is there."""
    found = [(m.lastgroup, m.group()) for m in _LABELS.finditer(norm)]
    if any(kind == "other" for kind, _ in found):
        return ""
    return found[-1][1] if found else None


def joined_rejection_reason(earlier: str, later: str) -> PiiCategory | None:
    """Return why two texts a user wrote one after the other must not both be kept, or None.

    A value split over two messages ("my national ID starts 00123" then "… and ends 45679",
    "I have dia" then "betes") passes the guard in each; read together, with or without a
    space between them, and with their digits side by side after the label that named them,
    it does not. Each text alone is expected to pass already.
    """
    reason = rejection_reason(f"{earlier} {later}") or rejection_reason(f"{earlier}{later}")
    if reason is not None:
        return reason
    first, second = checkable_form(earlier), checkable_form(later)
    if first is None or second is None:
        return PiiCategory.UNCHECKED
    label = _number_label(first)
    label = _number_label(second) if label is None else label
    digits_first, digits_second = _loose_digits(first), _loose_digits(second)
    if label == "" or not digits_first or not digits_second:
        return None
    return rejection_reason(f"{label or ''} {digits_first} {digits_second}")


def is_safe_for_memory(text: str, *, category: str | None = None) -> bool:
    """Return False when `text` carries PII or `category` is health-like, True otherwise."""
    return rejection_reason(text, category=category) is None
