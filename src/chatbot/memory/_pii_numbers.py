"""Find national IDs, card numbers and Sheba/IBAN numbers in the guard's form of a text.

- Digit groups joined by any run of up to eight separators (spaces, dashes, dots, slashes,
  commas, plus signs, mixed) form one number: "6037-9975 1234.5678" and "001,234,5679" are
  single numbers. Dates (1403/05/12, 2025-03-20) and amounts grouped in thousands
  (5,000,000) are walled off first, so two dates side by side are not one 10-digit number.
- A label right before a number decides how it is read. After "کد ملی" / "national ID" an
  8 to 10 digit number is a national ID even when its check digit fails (a mistyped ID
  still identifies a person; codes with leading zeros are often written without them).
  Unlabelled, only a 10-digit number with a valid check digit counts, and never one of a
  single repeated digit. After a label naming another kind of number (policy, plate,
  postal code, phone, claim...) the checksum-only rules are skipped, so a 10-digit postal
  code or policy number that happens to pass the check is not refused.
- "IR" followed by 24 digits is refused whatever its checksum; bare 24-digit numbers and
  other countries' IBANs are refused when mod 97 holds.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterator

from chatbot.memory._pii_category import PiiCategory

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
LABELS = re.compile(
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


def number_categories(norm: str) -> set[PiiCategory]:
    """Find national IDs, card numbers and Sheba/IBAN numbers in normalised text."""
    found: set[PiiCategory] = set()
    labels = [(m.end(), m.lastgroup or "") for m in LABELS.finditer(norm)]
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


def loose_digits(norm: str) -> str:
    """Return the digit groups of guard-form text, space-separated, leaving dates and amounts out."""
    masked = _DATE.sub(lambda m: _BARRIER * len(m.group()), norm)
    masked = _AMOUNT.sub(lambda m: _BARRIER * len(m.group()), masked)
    return " ".join(_GROUP.findall(masked))
