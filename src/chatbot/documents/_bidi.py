"""A line's characters put in logical order from where they stand on the page.

PDFium orders a line's characters itself, and gets mixed lines wrong: in a Persian line, a
Latin address comes out with its parts reversed (claims/example.acme), and a line holding
Latin and digits may come out in left-to-right order altogether. The positions do not lie:
sorted by their place on the line the characters are in visual order, and the visual order
of a paragraph without explicit embeddings turns back into logical order by the Unicode
bidirectional rules run backwards:

- in a right-to-left line, everything is reversed except the left-to-right runs (Latin
  words and the neutrals between them, numbers with their separators), which keep their
  order; in a left-to-right line, the right-to-left runs (with the numbers inside them)
  are reversed;
- a mark goes with the letter its ink lies over, and the letters of one glyph (a ligature)
  stay together, as they were mended (`_persian.mend_ligatures`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from chatbot.documents._persian import Glyph

Cluster = list[Glyph]


def logical_order(glyphs: Sequence[Glyph], rtl: bool) -> list[Glyph]:
    """Return a line's glyphs in logical order, from their boxes (ligatures already mended).

    `rtl` is the line's direction (its paragraph's).
    """
    tail = [g for g in glyphs if g.generated and g.left == g.right == 0.0]  # a hyphen PDFium marked
    placed = [g for g in glyphs if not (g.generated and g.left == g.right == 0.0)]
    clusters = _clusters(placed)
    clusters.sort(key=lambda c: (c[0].left + c[0].right) / 2)
    kinds = [_kind(c[0].char) for c in clusters]
    units = _units(kinds, rtl)
    ordered: list[Glyph] = []
    for start, end, reverse in units:
        part = clusters[start:end]
        for cluster in reversed(part) if reverse else part:
            ordered.extend(cluster)
    return ordered + tail


def _clusters(glyphs: Sequence[Glyph]) -> list[Cluster]:
    """Group glyphs into what moves as one: a base with its marks, the letters of one ligature."""
    clusters: list[Cluster] = []
    marks: list[Glyph] = []
    for glyph in glyphs:
        if unicodedata.category(glyph.char) == "Mn":
            marks.append(glyph)
        elif clusters and clusters[-1][0].left == glyph.left and clusters[-1][0].right == glyph.right:
            clusters[-1].append(glyph)  # another letter of the same glyph
        else:
            clusters.append([glyph])
    for mark in marks:
        base = _base_of(mark, clusters)
        if base is None:
            clusters.append([mark])
        else:
            base.append(mark)
    return clusters


def _base_of(mark: Glyph, clusters: list[Cluster]) -> Cluster | None:
    """Return the cluster whose ink lies most under a mark's."""
    best, overlap = None, 0.0
    for cluster in clusters:
        base = cluster[0]
        if base.char.isspace():
            continue
        shared = min(base.right, mark.right) - max(base.left, mark.left)
        if shared > overlap:
            best, overlap = cluster, shared
    return best


def _kind(char: str) -> str:
    """The part a character plays: L(eft-to-right), R(ight-to-left), N(umber), W(neutral), and the
    separators inside numbers: C (common: , . / :) and S (European: + - and terminators: % $)."""
    kind = unicodedata.bidirectional(char)
    if kind == "L":
        return "L"
    if kind in ("R", "AL"):
        return "R"
    if kind in ("EN", "AN"):
        return "N"
    if kind == "CS":
        return "C"
    if kind in ("ES", "ET"):
        return "S"
    return "W"


def _units(kinds: list[str], rtl: bool) -> list[tuple[int, int, bool]]:
    """Return (start, end, reversed) spans of the visual sequence, in logical order.

    Right to left: the line's units are taken from the right, each left-to-right run one unit
    kept in order. Left to right: units from the left, each right-to-left run reversed with
    the numbers inside it kept in order.
    """
    if rtl:
        runs = _ltr_runs(kinds, 0, len(kinds))
        units: list[tuple[int, int, bool]] = []
        position = len(kinds)
        for start, end in reversed(runs):
            units.extend((i, i + 1, False) for i in range(position - 1, end - 1, -1))
            units.append((start, end, False))
            position = start
        units.extend((i, i + 1, False) for i in range(position - 1, -1, -1))
        return units
    units = []
    position = 0
    for start, end in _rtl_runs(kinds):
        units.extend((i, i + 1, False) for i in range(position, start))
        inner = _ltr_runs(kinds, start, end, numbers_only=True)
        cursor = end
        for run_start, run_end in reversed(inner):
            units.extend((i, i + 1, False) for i in range(cursor - 1, run_end - 1, -1))
            units.append((run_start, run_end, False))
            cursor = run_start
        units.extend((i, i + 1, False) for i in range(cursor - 1, start - 1, -1))
        position = end
    units.extend((i, i + 1, False) for i in range(position, len(kinds)))
    return units


def _ltr_runs(kinds: list[str], start: int, end: int, *, numbers_only: bool = False) -> list[tuple[int, int]]:
    """Return the left-to-right runs in kinds[start:end]: Latin words and numbers with what joins them."""
    strong = ("N",) if numbers_only else ("L", "N")
    runs: list[tuple[int, int]] = []
    index = start
    while index < end:
        if kinds[index] not in strong:
            index += 1
            continue
        run_start = index
        last = index  # the last strong character of the run
        probe = index + 1
        while probe < end and kinds[probe] != "R":
            if kinds[probe] in strong:
                if not _joined(kinds, last, probe):
                    break
                last = probe
            probe += 1
        runs.append((run_start, last + 1))
        index = last + 1
    return runs


def _joined(kinds: list[str], left: int, right: int) -> bool:
    """Tell whether the neutrals between two left-to-right characters belong to their run.

    Adjacent characters are joined; neutrals between Latin letters (or a letter and a number)
    are theirs; between two numbers, only one separator is (2024/05/01, 10.5), and a hyphen
    or a sign only where no Arabic-script letter comes before the numbers in the line: after
    one they are Arabic numbers, which a hyphen parts (the rule runs on each line as drawn).
    """
    between = kinds[left + 1 : right]
    if not between:
        return True
    if "L" in (kinds[left], kinds[right]):
        return True
    if len(between) != 1:
        return False
    return between[0] == "C" or (between[0] == "S" and not _after_arabic_letters(kinds, right))


def _after_arabic_letters(kinds: list[str], index: int) -> bool:
    """Tell whether the strong character logically before a right-to-left line's number is a Persian one.

    Logically before, in right-to-left text, is to the right on the page.
    """
    for kind in kinds[index + 1 :]:
        if kind in ("L", "R"):
            return kind == "R"
    return False


def _rtl_runs(kinds: list[str]) -> list[tuple[int, int]]:
    """Return the right-to-left runs of a left-to-right line: from a Persian letter to the last before a Latin one."""
    runs: list[tuple[int, int]] = []
    index = 0
    while index < len(kinds):
        if kinds[index] != "R":
            index += 1
            continue
        start = index
        before = index - 1
        while before >= 0 and kinds[before] in ("W", "C", "S"):
            before -= 1
        if before >= 0 and kinds[before] == "N":  # a number drawn just left of it is its own (سال 2024)
            start = before
            while start > 0 and kinds[start - 1] in ("N", "C"):
                start -= 1
        last = index
        probe = index + 1
        while probe < len(kinds) and kinds[probe] != "L":
            if kinds[probe] in ("R", "N"):
                last = probe
            probe += 1
        runs.append((start, last + 1))
        index = last + 1
    return runs
