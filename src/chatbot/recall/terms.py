"""The terms a turn is indexed by and a question searches with, in Persian and English.

Spelling is retrieval's (retrieval/normalize.py): Arabic and Persian letter forms, Persian
and Arabic-Indic digits, diacritics and half-spaces fold to one form, compounds written
with a half-space also index their parts, and plurals their stem; a Persian word with a
possessive or indefinite ending also indexes the word without it. On top of it: stop words
of both languages go (the `simple` text-search form has none, and "the" or "که" would
match every turn), and English words longer than three letters are stemmed by Porter's
steps 1a and 1b (plurals, -eed, -ed, -ing) and 5a (a final "e"): "plates" meets "plate",
"agreed" meets "agree", "quoted" meets "quote". The terms are built here and handed to
Postgres as a tsvector literal, so the database never re-tokenises them: a plate like
"12ب345" stays the tokens it was here.

Every term is at most `MAX_TERM_BYTES` long in UTF-8, cut at a letter's boundary: Postgres
refuses a longer word in a tsvector or a tsquery ("word is too long"), and one such word
would fail every later search and index write of its thread. A question's terms are cut
the same way, so the cut word is still found by itself.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

from chatbot.retrieval.normalize import PERSIAN_STOPWORDS, index_form

_WORD = re.compile(r"[^\W_]+")
# Split letters from digits: "12ب345" and "ب۳۴۵" index "12", "ب", "345" alike, and "5pm" meets "5 pm".
_SCRIPT_RUN = re.compile(r"\d+|[^\W\d_]+")

# Not "may": it is also a month, and a turn saying "on the 2nd of May" must be found by it.
ENGLISH_STOPWORDS = frozenset(
    """
    a an the and or but if of to in on at by for with from as is are was were be been being am do does did
    done have has had having i me my mine we us our you your yours he him his she her hers it its they them
    their what which who whom whose this that these those there here then than so not no yes can could will
    would shall should might must about into over under again also just only very too any some all each
    both few more most other such own same how when where why up down out off once please thanks thank hi
    hello ok okay sure well get got let tell said say know think want need like now still yet
    """.split()
)
STOPWORDS = ENGLISH_STOPWORDS | PERSIAN_STOPWORDS
# Persian possessive and indefinite endings written on the word ("ماشینم" my car, "قیمتشان"
# their price, "تعمیرگاهی" a garage): such a word also indexes the word without it, at its
# side, so a question and a turn meet whichever of them carries the ending. Added, never
# replacing: a word whose own last letter looks like an ending ("پیام") keeps its form.
_PERSIAN_ENDING = re.compile(r"^(\w{3,}?)(شان|تان|مان|ام|ات|اش|ی|م|ش)$")
# Postgres' bound on one lexeme (tsvector and tsquery alike): 2,046 bytes.
MAX_TERM_BYTES = 2046
# Words of one letter carry no topic, except Persian plate letters between digits (kept: "ب").
_MIN_LETTERS = 2


_VOWELS = frozenset("aeiou")


def _measure(stem: str) -> int:
    """Porter's m: how many vowel-consonant sequences the stem has."""
    form = "".join(
        "v" if c in _VOWELS or (c == "y" and i > 0 and stem[i - 1] not in _VOWELS) else "c" for i, c in enumerate(stem)
    )
    return form.replace("vc", "|").count("|") if form else 0


def _has_vowel(stem: str) -> bool:
    return any(c in _VOWELS for c in stem) or "y" in stem[1:]


def _cvc(stem: str) -> bool:
    """Whether the stem ends consonant-vowel-consonant, the last not w, x or y ("hop", not "quot")."""
    if len(stem) < 3:
        return False
    a, b, c = stem[-3], stem[-2], stem[-1]
    return a not in _VOWELS and b in _VOWELS and c not in _VOWELS and c not in "wxy"


def _step_1b_tidy(stem: str) -> str:
    if stem.endswith(("at", "bl", "iz")):
        return stem + "e"
    if len(stem) > 1 and stem[-1] == stem[-2] and stem[-1] not in "lsz" and stem[-1] not in _VOWELS:
        return stem[:-1]
    return stem + "e" if _measure(stem) == 1 and _cvc(stem) else stem


def _final_e(word: str) -> str:
    """Drop a final e as Porter's step 5 does, so "quote" and "quoted" (quot) meet."""
    if word.endswith("e") and (_measure(word[:-1]) > 1 or (_measure(word[:-1]) == 1 and not _cvc(word[:-1]))):
        return word[:-1]
    return word


def _stem(word: str) -> str:
    """Return an English word's stem by Porter's steps 1a, 1b and 5a: plurals, -ed and -ing, a final e.

    "agreed" and "agree" both give "agre". Unlike Porter, a final "s" after "us" or "is" stays
    ("bus", "analysis"). Words of three letters or fewer, or not all ASCII letters, are left as
    written: Persian words come stemmed from index_form (plurals).
    """
    if not word.isascii() or len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("eed"):
        return _final_e(word[:-1] if _measure(word[:-3]) > 0 else word)
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]) and len(word) - len(suffix) >= 3:
            return _final_e(_step_1b_tidy(word[: -len(suffix)]))
    return _final_e(word)


def bounded(term: str) -> str:
    """Return the term cut to at most `MAX_TERM_BYTES` in UTF-8, never inside a letter."""
    encoded = term.encode()
    if len(encoded) <= MAX_TERM_BYTES:
        return term
    return encoded[:MAX_TERM_BYTES].decode(errors="ignore")


def terms(text: str) -> list[str]:
    """Return the text's search terms in order, repeats kept (their count is BM25's term frequency).

    Each is bounded (`bounded`): what Postgres can store, whatever the text.
    """
    return [bounded(term) for term in _unbounded_terms(text)]


def _unbounded_terms(text: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(index_form(text)):
        for part in _SCRIPT_RUN.findall(word) if not word.isdigit() else [word]:
            if part in STOPWORDS or word in STOPWORDS:
                continue
            if part.isdigit():
                out.append(part.lstrip("0") or "0")
            elif len(part) >= _MIN_LETTERS or not part.isascii():
                out.append(_stem(part))
                if not part.isascii() and (ending := _PERSIAN_ENDING.match(part)) and ending[1] not in STOPWORDS:
                    out.append(ending[1])
    return out


def tsvector_literal(found: Iterable[str]) -> str:
    """Return the terms as a tsvector literal with their positions ('plate':1,4 'garage':2)."""
    places: dict[str, list[int]] = {}
    for position, term in enumerate(map(bounded, found), start=1):
        # tsvector positions stop at 16383, and 256 positions per term are kept.
        places.setdefault(term, []).append(min(position, 16383))
    return " ".join(f"'{term}':{','.join(str(p) for p in spots[:256])}" for term, spots in places.items())


def query_weights(
    question: str,
    context: Iterable[str],
    *,
    context_weight: float,
    limit: int,
    related: Callable[[list[str]], list[str]] | None = None,
    related_weight: float = 0.5,
) -> dict[str, float]:
    """Return the query's terms and weights: the question's at 1, related words and the recent turns' lower.

    A follow-up ("and what was his plate?") names little of what it is about; the recent
    window names the rest. Its terms count for less, so a question naming its subject
    is not pulled off it by the conversation around it. `related` gives other words for
    the question's own (recall/related.py). At most `limit` terms: the question's first,
    then its related words, then the context's most frequent.
    """
    asked = terms(question)
    weights: dict[str, float] = dict.fromkeys(asked, 1.0)
    for term in related(asked) if related is not None else []:
        weights.setdefault(term, related_weight)
    counts = Counter(t for text in context for t in set(terms(text)) if t not in weights)
    for term, _ in counts.most_common():
        if len(weights) >= limit:
            break
        weights[term] = context_weight
    return dict(list(weights.items())[:limit])
