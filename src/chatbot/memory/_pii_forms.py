"""The one form of a text every PII decision reads, and the bound on how much of it is read.

- One normalisation before every decision (`normalize_for_pii`): NFKC; every
  default-ignorable or invisible code point removed, never turned into a space
  ("dia\u200bbetes" is "diabetes", U+034F or U+E0020 between digits join them); combining
  marks stripped (from digits too); every Unicode decimal digit as ASCII; lookalike letters
  folded (Cyrillic, Greek, small capitals; Arabic letter variants as Persian ones; fullwidth
  and mathematical alphanumerics are NFKC's); spelled-out digits read as digits when a run of
  them makes a number of six digits or more ("zero zero one two …", "صفر صفر یک دو …");
  letters written one by one joined ("d i a b e t e s"). The Persian zero-width non-joiner,
  which also ends a prefix ("پیش\u200cدیابت"), is read as a space too for the health terms.
- The guard reads at most MAX_CHECKED_CHARS characters, before and after normalisation.
  NFKC turns some single characters into many (U+FDFA into 18), so a legal 8,000-character
  message could otherwise become 144,000 characters for every pattern here, on the event
  loop. Text longer than that is not checked and so is refused (UNCHECKED): nothing is
  ever stored unchecked.
"""

from __future__ import annotations

import re
import unicodedata

from chatbot.text import fold_all_digits, normalize_persian

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
NUMBER_WORD_VALUES = {
    **{w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine".split())},
    **{w: str(i) for i, w in enumerate("صفر یک دو سه چهار پنج شش هفت هشت نه".split())},
    "شیش": "6",
    "oh": "0",
}
NUMBER_WORDS = "|".join(sorted(NUMBER_WORD_VALUES, key=len, reverse=True))
# Possessive, and a digit group only from its first digit: a run of digits is never retried
# from each of its positions (which made 4,000 digits cost a second).
_NUMBER_TOKEN = rf"(?:(?<![^\W\d_])(?:{NUMBER_WORDS})(?![^\W\d_])|(?<![0-9])[0-9]++)"
_NUMBER_WORD_RUN = re.compile(rf"{_NUMBER_TOKEN}(?:[\s,،\-./+_]++{_NUMBER_TOKEN})+")
_NUMBER_WORD_ONLY = re.compile(rf"(?<![^\W\d_])(?:{NUMBER_WORDS})(?![^\W\d_])")
_WORDS_MAKE_A_NUMBER = 6  # digits in a run with number words in it before it counts as one number
# Letters written one by one ("d i a b e t e s", "d-i-a-b-e-t-e-s"): at least four, joined.
_SPACED_LETTERS = re.compile(r"(?<![^\W\d_])[^\W\d_](?:[\s.\-_*·]{1,2}[^\W\d_](?![^\W\d_])){3,}")
_LETTER_SEPARATORS = re.compile(r"[\s.\-_*·]+")


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
        return fold_for_pii(nfkc[: limit + 1])[: limit + 1]
    return fold_for_pii(nfkc)


def fold_for_pii(nfkc: str) -> str:
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
    as_digits = _NUMBER_WORD_ONLY.sub(lambda m: NUMBER_WORD_VALUES[m.group()], run.group())
    return as_digits if sum(c.isdigit() for c in as_digits) >= _WORDS_MAKE_A_NUMBER else run.group()


def checkable_forms(text: str) -> tuple[str, str] | None:
    """Return the NFKC and guard forms of `text`, or None when either is longer than the guard reads."""
    if len(text) > MAX_CHECKED_CHARS:
        return None
    nfkc = unicodedata.normalize("NFKC", text)
    if len(nfkc) > MAX_CHECKED_CHARS:
        return None
    norm = fold_for_pii(nfkc)
    # Casefolding can lengthen too ("ΐ" becomes three characters).
    return (nfkc, norm) if len(norm) <= MAX_CHECKED_CHARS else None
