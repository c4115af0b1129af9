"""Persian (and Arabic-script) text as a PDF's text layer gives it, put back as it was written.

A PDF holds glyphs, not text. Reading one back loses or garbles what shaping did:
- a glyph standing for several letters (lam-alef, a font's own two-letter ligatures) comes
  out of PDFium with its letters reversed (`mend_ligatures`);
- a ZWNJ has no glyph, so it is gone; where it stood, the letter before it was drawn in its
  final form and the one after in its initial form, which shows as a gap between their ink
  (joined letters touch) or as the letter's word-end shape (`LetterForms`), or, where the
  text keeps them, as the presentation forms themselves; where nothing shows it, an affix
  rule in the spirit of hazm's normaliser decides;
- mirrored punctuation (« » ( ) [ ]) was drawn as its mirror image in right-to-left text;
- presentation forms (U+FB50-U+FDFF, U+FE70-U+FEFF) stand for plain letters;
- a mark (hamza above, a vowel sign) may be read apart from its letter.

`repair_line` mends one line from its glyphs and boxes (what PDFium gives), in logical
order (`_bidi.py`); `repair_text` mends text alone (for extractors that give no boxes),
with the affix rule for the ZWNJ.
Persian and Arabic-Indic digits are kept as written.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

ZWNJ = "\u200c"

# Letters that join the letter after them (dual-joining); the rest of the Arabic-script
# letters (ا آ أ إ د ذ ر ز ژ و ؤ ة ء) never do, so no ZWNJ is needed after them.
_JOINS_NEXT = frozenset("بپتثجچحخسشصضطظعغفقکگلمنهیئيكـ")
_MARKS = re.compile(r"[\u064b-\u065f\u0670\u06d6-\u06ed]")
_MIRRORED = {"(": ")", ")": "(", "[": "]", "]": "[", "{": "}", "}": "{", "«": "»", "»": "«", "<": ">", ">": "<"}
_LATIN_LIGATURES = re.compile("[\ufb00-\ufb06]")
_PRESENTATION = re.compile("[\ufb50-\ufdff\ufe70-\ufefe]")

GAP_SHARE = 0.04
"""A gap between two letters' ink wider than this share of the font size is a non-joining boundary."""


def is_arabic_letter(char: str) -> bool:
    """Tell whether a character is an Arabic-script letter (base letters or presentation forms)."""
    if "\u0620" <= char <= "\u064a" or "\u066e" <= char <= "\u06d3" or "\u06fa" <= char <= "\u06ff":
        return True
    return ("\ufb50" <= char <= "\ufdff" or "\ufe70" <= char <= "\ufefc") and unicodedata.category(char) == "Lo"


def letter_directions(text: str) -> tuple[int, int]:
    """Count a text's right-to-left and left-to-right letters."""
    right = left = 0
    for char in text:
        kind = unicodedata.bidirectional(char)
        if kind in ("R", "AL"):
            right += 1
        elif kind == "L":
            left += 1
    return right, left


def is_rtl_text(text: str, mixed_rtl: bool | None = None) -> bool:
    """Tell whether a line is right-to-left.

    A line of one script goes its script's way. A line of both takes `mixed_rtl` (the page's
    way: a Persian line may end in a Latin address longer than its Persian part), or, not
    given, at least half as many right-to-left letters as left-to-right ones.
    """
    right, left = letter_directions(text)
    if not right or not left or mixed_rtl is None:
        return right > 0 and 2 * right >= left
    return mixed_rtl


@dataclass(frozen=True, slots=True)
class Glyph:
    """One character of a line as the text layer gives it, with its ink's box.

    `left` and `right` are the ink's edges on the page; `low` and `high` its bottom and top
    from the baseline (below it is negative), in points.
    """

    char: str
    left: float
    right: float
    size: float
    generated: bool = False
    low: float = 0.0
    high: float = 0.0
    bold: bool = False

    def shape(self) -> tuple[int, int, int]:
        """The ink's width, bottom and top, in hundredths of the font size: one per glyph of a font."""
        scale = 100 / self.size if self.size else 0.0
        return (round((self.right - self.left) * scale), round(self.low * scale), round(self.high * scale))


class LetterForms:
    """The shapes each joining letter has at a word's end and inside words, over the pages read so far.

    A joining letter drawn before a ZWNJ takes its final (or isolated) form, the glyph it has
    at a word's end, not the medial (or initial) one it has inside a word. A glyph's ink box,
    scaled by the font size, tells one glyph of a font from another: a letter inside a word
    whose box is one its word-end form has was drawn unjoined. Shapes are kept per letter,
    weight and whether the letter before joins it (final and isolated forms differ).

    Some fonts draw a letter's medial form with the same box as its final one (ط in IBM
    Plex): then every inside occurrence matches a word-end shape, and the shape says nothing.
    A letter is judged by its shape only once its inside occurrences show a shape of their
    own, in at least `DISTINCT` of them (two at least); a ZWNJ may follow a letter often (ه in
    بیمه‌نامه), so a word-end shape inside a word is no sign of ambiguity by itself.
    """

    DISTINCT = 0.1

    def __init__(self) -> None:
        self._at_end: dict[tuple[str, bool, bool], set[tuple[int, int, int]]] = {}
        self._inside: dict[tuple[str, bool, bool], Counter[tuple[int, int, int]]] = {}
        self._trusted: dict[tuple[str, bool, bool], bool] = {}

    def observe(self, letters: Sequence[JoiningLetter]) -> None:
        """Record the shapes of one line's joining letters (`joining_letters`)."""
        self._trusted.clear()
        for _, glyph, joined_before, following in letters:
            key = (glyph.char, glyph.bold, joined_before)
            if following is None:
                shapes = self._at_end.setdefault(key, set())
                if len(shapes) < 16:
                    shapes.add(glyph.shape())
            else:
                self._inside.setdefault(key, Counter())[glyph.shape()] += 1

    def drawn_unjoined(self, glyph: Glyph, joined_before: bool) -> bool | None:
        """Tell whether a letter inside a word has the shape of its word-end form; None if no shape tells."""
        key = (glyph.char, glyph.bold, joined_before)
        ends = self._at_end.get(key)
        if not ends:
            return None
        trusted = self._trusted.get(key)
        if trusted is None:
            inside = self._inside.get(key, Counter())
            other = sum(n for shape, n in inside.items() if not _matches(shape, ends))
            trusted = self._trusted[key] = other >= max(2, self.DISTINCT * sum(inside.values()))
        if not trusted:
            return None  # its inside form has not been seen apart from its word-end form
        return _matches(glyph.shape(), ends)


def _matches(shape: tuple[int, int, int], shapes: set[tuple[int, int, int]]) -> bool:
    width, low, high = shape
    return any(abs(width - w) <= 1 and abs(low - lo) <= 1 and abs(high - hi) <= 1 for w, lo, hi in shapes)


JoiningLetter = tuple[int, Glyph, bool, int | None]
"""A joining letter of a line: its index, glyph, whether the letter before joins it, the next letter's index."""


def joining_letters(glyphs: Sequence[Glyph]) -> list[JoiningLetter]:
    """Return each joining letter with whether the letter before it joins it and the next letter's index."""
    found = []
    previous: Glyph | None = None
    for index, glyph in enumerate(glyphs):
        if _MARKS.match(glyph.char):
            continue
        if not is_arabic_letter(glyph.char):
            previous = None
            continue
        joined_before = previous is not None and previous.char in _JOINS_NEXT and previous.left != glyph.left
        if glyph.char in _JOINS_NEXT and (index + 1 >= len(glyphs) or glyphs[index + 1].left != glyph.left):
            found.append((index, glyph, joined_before, _next_letter(glyphs, index)))
        previous = glyph
    return found


def mend_ligatures(glyphs: Sequence[Glyph]) -> list[Glyph]:
    """Put back in order the letters of one glyph: they share its box and came out reversed.

    Lam-alef is always lam first (a legacy PDF's lam-alef form comes out right, a shaped
    PDF's ligature glyph reversed); a font's other ligatures come out reversed.
    """
    result: list[Glyph] = []
    index = 0
    while index < len(glyphs):
        end = index + 1
        first = glyphs[index]
        while (
            end < len(glyphs)
            and not glyphs[end].generated
            and glyphs[end].left == first.left
            and glyphs[end].right == first.right
            and is_arabic_letter(glyphs[end].char)
        ):
            end += 1
        group = list(glyphs[index:end])
        if len(group) > 1 and is_arabic_letter(first.char):
            if len(group) == 2 and {g.char for g in group} & {"ل"} and {g.char for g in group} & set("اآأإ"):
                group.sort(key=lambda g: g.char != "ل")
            else:
                group.reverse()
        result.extend(group)
        index = end
    return result


def repair_line(
    glyphs: Sequence[Glyph],
    rtl: bool,
    forms: LetterForms | None = None,
    letters: Sequence[JoiningLetter] | None = None,
) -> str:
    """Return a line's text, repaired, from its glyphs in logical order with ligatures mended.

    A ZWNJ goes after a joining letter of a word drawn apart from the next (a gap in the ink)
    or in its word-end form (`LetterForms`); where the forms cannot tell (that letter not yet
    seen at a word's end in its context), the affix rule decides at that letter alone.
    """
    unjoined: set[int] = set()
    undecided: set[int] = set()
    for index, glyph, joined_before, following in joining_letters(glyphs) if letters is None else letters:
        if following is None:
            continue
        verdict = forms.drawn_unjoined(glyph, joined_before) if forms is not None else None
        if _non_joining_gap(glyph, glyphs[following]) or verdict:
            unjoined.add(index)
        elif verdict is None:
            undecided.add(index)
    if undecided:
        unjoined |= _affix_boundaries(glyphs, unjoined) & undecided
    chars: list[str] = []
    for index, glyph in enumerate(glyphs):
        chars.append(glyph.char)
        if index in unjoined:
            chars.append(ZWNJ)
    return _finish("".join(chars), rtl)


def _affix_boundaries(glyphs: Sequence[Glyph], unjoined: set[int]) -> set[int]:
    """Return the letters the affix rule puts a ZWNJ after, in each part of a word between ZWNJs already found."""
    found: set[int] = set()
    part: list[int] = []
    for index in range(len(glyphs) + 1):
        if index < len(glyphs) and is_arabic_letter(glyphs[index].char):
            part.append(index)
            if index not in unjoined:
                continue
        if part:
            boundary = _affix_boundary("".join(glyphs[i].char for i in part))
            if boundary is not None:
                found.add(part[boundary - 1])
            part = []
    return found


def _next_letter(glyphs: Sequence[Glyph], index: int) -> int | None:
    """Return the index of the letter after `index` in the same word (marks skipped), if any."""
    for later in range(index + 1, len(glyphs)):
        char = glyphs[later].char
        if _MARKS.match(char):
            continue
        return later if is_arabic_letter(char) else None
    return None


def _non_joining_gap(glyph: Glyph, following: Glyph) -> bool:
    """Tell whether two letters of one word were drawn apart though the first joins what follows it."""
    if glyph.char not in _JOINS_NEXT or glyph.left == following.left:
        return False
    # Right to left: the following letter's ink ends to the left of this one's start.
    return glyph.left - following.right > GAP_SHARE * glyph.size


def _finish(text: str, rtl: bool) -> str:
    """Repairs that need no geometry: forms folded, ligatures unfolded, marks and mirrors put back."""
    text = fold_forms(text)
    text = _attach_marks(text)
    return _unmirror(text, rtl)


def fold_forms(text: str) -> str:
    """Fold presentation forms to letters, restoring a ZWNJ the forms show, and unfold Latin ligatures."""
    if _PRESENTATION.search(text):
        text = _zwnj_from_forms(text)
        text = _PRESENTATION.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    if _LATIN_LIGATURES.search(text):
        text = _LATIN_LIGATURES.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    return text


def _form(char: str) -> str | None:
    """Return a presentation form's shape ('initial', 'medial', 'final', 'isolated') or None."""
    decomposition = unicodedata.decomposition(char)
    if decomposition.startswith("<"):
        return decomposition[1 : decomposition.index(">")]
    return None


def _zwnj_from_forms(text: str) -> str:
    """Insert a ZWNJ where a joining letter is drawn unjoined (final/isolated) before a letter of its word."""
    out: list[str] = []
    for index, char in enumerate(text):
        out.append(char)
        if index + 1 >= len(text) or _form(char) not in ("final", "isolated"):
            continue
        letter = unicodedata.normalize("NFKC", char)
        following = text[index + 1]
        if len(letter) == 1 and letter in _JOINS_NEXT and _form(following) in ("initial", "isolated"):
            out.append(ZWNJ)
    return "".join(out)


_DETACHED_MARK = re.compile(r"(^|\s)([\u064b-\u065f\u0670]+)(\S)")


def _attach_marks(text: str) -> str:
    """Put a mark read before its letter (often with a space before it) back after that letter."""
    return _DETACHED_MARK.sub(lambda m: m.group(3) + m.group(2), text)


def _unmirror(text: str, rtl: bool) -> str:
    """Give mirrored punctuation resolved right to left its logical character back."""
    if not any(c in _MIRRORED for c in text):
        return text
    chars = list(text)
    strong = [_strong(c) for c in chars]
    for index, char in enumerate(chars):
        if char not in _MIRRORED:
            continue
        before = next((s for s in reversed(strong[:index]) if s), None)
        after = next((s for s in strong[index + 1 :] if s), None)
        direction = before if before == after and before else ("R" if rtl else "L")
        if direction == "R":
            chars[index] = _MIRRORED[char]
    return "".join(chars)


def _strong(char: str) -> str | None:
    """Return the direction a character gives the neutrals beside it (digits count as right to left)."""
    kind = unicodedata.bidirectional(char)
    if kind == "L":
        return "L"
    if kind in ("R", "AL", "AN"):
        return "R"
    if kind == "EN" and "\u06f0" <= char <= "\u06f9":
        return "R"
    return None


def repair_text(text: str) -> str:
    """Repair text that came without geometry: forms folded, marks and mirrors, ZWNJ by affix rule."""
    lines = []
    for line in text.split("\n"):
        rtl = is_rtl_text(line)
        repaired = _finish(line, rtl)
        lines.append(restore_zwnj_by_affix(repaired) if rtl else repaired)
    return "\n".join(lines)


# The affix rule, in the spirit of hazm's normaliser: a verb prefix (می، نمی) and the plural,
# comparative and pronoun suffixes are written apart from their stem with a ZWNJ. Only
# joined forms that are unambiguous are split: words that merely begin with می (میز، میلادی)
# or end in ها/تر (تنها، دختر) are listed, and a suffix is split only after a stem of two
# letters or more that ends in a letter that would otherwise join it; ه + ای/ام/... only after
# a joining letter (خطرهای is خطر + های, not خطره + ای), as are the word-forming parts that
# follow a final ه (بیمه‌گذار، بیمه‌گر، بیمه‌نامه).
_NOT_MI_VERBS = frozenset(
    "میز میزان میلادی میلیون میلیارد میان میانه میانگین میوه میراث میهمان میدان میل میکروب میخ میش "
    "میزبان میزبانی میلی میانی میهن میدانی میمون".split()
)
_NOT_SUFFIXED = frozenset(
    "تنها رها بها آنها اینها دختر دفتر بستر کبوتر چتر اختر اکثر کمتر بیشتر بهتر بدتر مهتر کهتر "
    "شتر قطر خطر منتظر ستر".split()
)
_MI_VERB = re.compile(r"^(ن?می)([^\s\u200c]{2,}(?:د|ند|م|یم|ید|ی))$")
_SUFFIX = re.compile(r"^([^\s\u200c]{2,}?)(هایی|هایم|هایت|هایش|هایمان|هایتان|هایشان|های|ها|ترین|تر)$")
_AFTER_HEH = re.compile(
    r"^([^\s\u200c]+[بپتثجچحخسشصضطظعغفقکگلمنهی]ه)"
    r"(ای|ام|ات|اش|ایم|اید|اند|گذار|گذاران|گذاری|گر|گران|گری|نامه|نامه‌ای|گاه|گاهی)$"
)
_TOKEN = re.compile(r"[\u0600-\u06ff\u200c]+")


def restore_zwnj_by_affix(text: str) -> str:
    """Insert the ZWNJ the affix rule expects in joined Persian words (used where no glyph shows it)."""

    def split(match: re.Match[str]) -> str:
        word = match.group()
        boundary = _affix_boundary(word)
        return word if boundary is None else word[:boundary] + ZWNJ + word[boundary:]

    return _TOKEN.sub(split, text)


def _affix_boundary(word: str) -> int | None:
    """Return where the affix rule puts a ZWNJ in a joined word (the length of the part before it), or None."""
    if ZWNJ in word or word in _NOT_SUFFIXED or word in _NOT_MI_VERBS:
        return None
    verb = _MI_VERB.match(word)
    if verb:
        return len(verb.group(1))
    heh = _AFTER_HEH.match(word)
    if heh:
        return len(heh.group(1))
    suffixed = _SUFFIX.match(word)
    if suffixed and suffixed.group(1)[-1] in _JOINS_NEXT:
        return len(suffixed.group(1))
    return None
