"""Read two messages as one value only when they say they are one.

A national ID, a card number or a health word split over two messages passes the guard in
each, so the writer reads each new fact together with the user's recent ones. Reading the
digits of any two facts side by side also reads two values of one kind as one number: "my
car mileage is 12345 km", then "my car mileage is 67891 km now" gave 1234567891, a national
ID with a valid check digit (about one pair of 5-digit numbers in eleven), and both facts were
deleted. So the digits of two messages are put together only with evidence that they are one
value:

- a continuation cue: the later message says it goes on ("it ends in", "the rest is", "and
  then", "ادامه‌اش", "بقیه‌اش", "آخرش", "با … تمام می‌شود" ...), or the earlier one says it is
  a beginning ("starts with", "the first half", "با … شروع می‌شود", "اولش" ...);
- matching labels: both messages name a national ID, both a card, or both a Sheba number;
- a message that is a number and nothing else (it means something only with its neighbour);
- a labelled value: one message names a national ID, a card or a Sheba number and neither
  names an ordinary kind of number; then only a shape whose check digit holds counts (a
  10-digit ID, a 16-digit card, a 24-digit Sheba), as for an unlabelled number in one message.

Two messages that name the same ordinary kind of number (mileage, street, premium, year, age;
policy, phone, plate ... as the guard's labels name them) and no ID, card or Sheba are a
changed fact, whatever else they say: the writer keeps the old one in the history.

A health word is read across the boundary where the earlier message's last words and the
later one's first run straight on ("I have dia" + "betes"), and, after a continuation cue,
with the words around the cue ("type 2 dia" + "it ends in betes", "دیا" + "آخرش بت است").
Letters complete a health term only when a word was cut on purpose; digits made an ID by
chance, which is why only they need the evidence above.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

from chatbot.memory._pii_forms import NUMBER_WORD_VALUES, NUMBER_WORDS
from chatbot.memory._pii_numbers import LABELS, loose_digits

# The later message goes on from the earlier one. Written for the guard's form: casefolded,
# Persian folded, zero-width non-joiners removed ("ادامه‌اش" is "ادامهاش").
_CONTINUES = re.compile(
    r"\bends?\s+(?:in|with)\b|\bending\s+(?:in|with|is)\b|\bthe\s+end\s+(?:is|of\s+it)\b"
    r"|\bthe\s+rest\b|\bthe\s+remaining\b|\bremainder\b|\bfollowed\s+by\b|\bcontinu(?:es|ed|ing|ation)\b"
    r"|^\W*(?:and\s+)?then\b|\band\s+then\b|^\W*after\s+that\b"
    r"|\bfinish(?:es|ing)?\s+(?:in|with)\b|\bpart\s+(?:2|two|ii)\b"
    r"|\b(?:second|2nd|other|last|final|next)\s+(?:half|part|bit|piece|digits|numbers|letters|few)\b"
    r"|\blast\s+(?:[0-9]+|two|three|four|five|six|seven|eight)\s+(?:digits|numbers|letters)\b"
    r"|(?<!\w)(?:ادامه|بقیه|دنباله)(?:\s*(?:ا?ش|ی?\s*[آا]ن))?(?!\w)|ادامش|بقیش|(?<!\w)ته\s*ا?ش(?!\w)"
    r"|(?<!\w)[آا]خرش|(?<!\w)[آا]خر\s*[آا]ن"
    r"|(?:تمام|تموم|ختم)\s*(?:می|م)\s*(?:شود|شه|شد)"
    r"|(?:نیمه|نصفه|قسمت|بخش|تکه|تیکه)\s*(?:ی\s*)?(?:دوم|بعدی|[آا]خر)"
    r"|(?:رقم|ارقام|عدد|حرف|حروف)\s*(?:ها\s*)?(?:ی\s*)?[آا]خر|(?<!\w)بعدش(?!\w)|(?<!\w)و\s*بعد(?!\w)(?!\s*از)"
)
# The earlier message is the beginning of something.
_BEGINS = re.compile(
    r"\bstart(?:s|ing)?\s+(?:with|in)\b|\bbegin(?:s|ning)?\b|\b(?:first|1st)\s+(?:half|part|bit|piece|digits|few)\b"
    r"|\bfirst\s+(?:[0-9]+|two|three|four|five|six|seven|eight)\s+(?:digits|numbers|letters)\b"
    r"|شروع\s*(?:می|م)\s*(?:شود|شه|شد)|شروعش|(?<!\w)اولش"
    r"|(?:نیمه|نصفه|قسمت|بخش|تکه|تیکه)\s*(?:ی\s*)?اول|(?:رقم|ارقام|عدد|حرف|حروف)\s*(?:ها\s*)?(?:ی\s*)?اول"
)
# Ordinary kinds of number, beside the guard's own labels of other kinds (policy, plate, phone ...).
_ORDINARY = re.compile(
    r"(?P<mileage>\b(?:mileage|odometer|kms?|kilomet(?:er|re)s?|miles?)\b|کیلومتر|کارکرد)"
    r"|(?P<street>\b(?:street|st|avenue|ave|road|alley|lane|boulevard|square|address|house|building|unit"
    r"|apartment|flat|floor|suite|block)\b|خیابان|کوچه|بلوار|میدان|[آا]درس|نشانی|ساختمان|واحد|طبقه|بلوک)"
    r"|(?P<premium>\b(?:premiums?|price|costs?|fees?|amount|deductible|dollars?|usd|rials?|tomans?|euros?"
    r"|salary|income|pay|pays|paid)\b|حق\s*بیمه|قیمت|هزینه|مبلغ|تومان|ریال|دلار|یورو|فرانشیز|قسط|حقوق|درامد)"
    r"|(?P<year>\b(?:years?|born|model)\b|سال|متولد|تولد|مدل)"
    r"|(?P<age>\b(?:age|aged|old)\b|(?<!\w)سن(?!\w)|سنم|ساله|سالمه)"
)
_PII_KINDS = frozenset({"nid", "card", "iban"})
_LETTER = re.compile(r"[^\W\d_]")
_WORD = re.compile(r"[^\W\d_]+")
# Two or more digits spelled as words: read as digits here, where the other half may hold the rest
# (one message reads such a run as a number only from six digits on).
_SPELLED_RUN = re.compile(rf"(?<![^\W\d_])(?:{NUMBER_WORDS})(?:[\s,،\-./+_]++(?:{NUMBER_WORDS}))+(?![^\W\d_])")
_SPELLED_WORD = re.compile(rf"(?<![^\W\d_])(?:{NUMBER_WORDS})(?![^\W\d_])")
_WORDS_AROUND_A_CUE = 2  # words read on each side of a cue, and at each end of a message
_CUES_READ = 4  # cues around which words are joined: a message of nothing but cues costs no more
_WORDS_BEFORE_THE_END = 3  # with a cue, the cut word may sit before the earlier message's last ("من دیا دارم")


def says_it_goes_on(first: str, second: str) -> bool:
    """Tell whether guard-form texts say they are two parts of one thing (a continuation cue)."""
    return _CONTINUES.search(second) is not None or _BEGINS.search(first) is not None


def _labels(norm: str) -> tuple[frozenset[str], frozenset[str], str | None]:
    """Return the ID/card/Sheba label kinds in `norm`, its ordinary kinds, and its last ID/card/Sheba label."""
    pii: set[str] = set()
    ordinary: set[str] = set()
    last = None
    for match in LABELS.finditer(norm):
        kind = match.lastgroup or ""
        if kind in _PII_KINDS:
            pii.add(kind)
            last = match.group()
        else:  # the guard's label of another kind of number, named by its words
            ordinary.add("".join(match.group().split()))
    ordinary.update(m.lastgroup or "" for m in _ORDINARY.finditer(norm))
    return frozenset(pii), frozenset(ordinary), last


def _spelled_as_digits(norm: str) -> str:
    """Return `norm` with every run of two or more number words written as digits."""
    return _SPELLED_RUN.sub(lambda m: _SPELLED_WORD.sub(lambda w: NUMBER_WORD_VALUES[w.group()], m.group()), norm)


def digits_read_together(first: str, second: str) -> str | None:
    """Return the text to check when the digits of two guard-form texts are one value, else None.

    The text is the digits of both, side by side, after the label that reads them: an ID,
    card or Sheba label when either names one (that kind's lengths, without its check digit),
    another kind's label when only such labels are there (no checksum rule), nothing when
    there is no label (only a checksummed shape). For a labelled value without other evidence
    the label is left out, so only a checksummed shape counts.
    """
    digits_first = loose_digits(_spelled_as_digits(first))
    digits_second = loose_digits(_spelled_as_digits(second))
    if not digits_first or not digits_second:
        return None
    pii_first, ordinary_first, label_first = _labels(first)
    pii_second, ordinary_second, label_second = _labels(second)
    pii_label = label_first or label_second
    if pii_label is None and ordinary_first & ordinary_second:
        return None  # the same ordinary kind of number, changed: a fact, not a half
    digits = f"{digits_first} {digits_second}"
    bare = _LETTER.search(first) is None or _LETTER.search(second) is None
    if says_it_goes_on(first, second) or pii_first & pii_second or bare:
        label = pii_label or _other_label(first) or _other_label(second) or ""
        return f"{label} {digits}".strip()
    if pii_label is not None and not ordinary_first and not ordinary_second:
        return digits
    return None


def _other_label(norm: str) -> str | None:
    """Return the guard's last label of another kind of number in `norm` (it turns the checksum rules off)."""
    found = [m.group() for m in LABELS.finditer(norm) if m.lastgroup == "other"]
    return found[-1] if found else None


def words_read_together(first: str, second: str) -> Iterator[str]:
    """Yield the joins of words across two guard-form texts in which a health word may have been cut.

    The earlier text's last words run straight on into the later one's first, with and
    without a space; after a continuation cue, each of the earlier text's last words joins
    each word on either side of the cue too. Bounded: a few words from each end.
    """
    tail = _WORD.findall(first[-200:])[-_WORDS_AROUND_A_CUE:]
    head = _WORD.findall(second[:200])[:_WORDS_AROUND_A_CUE]
    if tail and head:
        yield " ".join(tail) + "".join(head[:1]) + " " + " ".join(head[1:])
        yield " ".join(tail) + " " + " ".join(head)
    if not tail or not says_it_goes_on(first, second):
        return
    around: list[str] = []
    for cue in itertools.islice(_CONTINUES.finditer(second), _CUES_READ):
        around += _WORD.findall(second[max(0, cue.start() - 200) : cue.start()])[-_WORDS_AROUND_A_CUE:]
        around += _WORD.findall(second[cue.end() : cue.end() + 200])[:_WORDS_AROUND_A_CUE]
    for end in _WORD.findall(first[-200:])[-_WORDS_BEFORE_THE_END:]:
        for start in around:
            yield end + start
