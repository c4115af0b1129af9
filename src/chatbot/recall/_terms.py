"""The terms a turn is indexed by and a question searches with, in Persian and English.

Spelling is retrieval's (retrieval/normalize.py): Arabic and Persian letter forms, Persian
and Arabic-Indic digits, diacritics and half-spaces fold to one form, compounds written
with a half-space also index their parts, and plurals their stem. On top of it: stop words
of both languages go (the `simple` text-search form has none, and "the" or "که" would
match every turn), and English words lose a plural "s" (a light stemmer: "plates" meets
"plate"). The terms are built here and handed to Postgres as a tsvector literal, so the
database never re-tokenises them: a plate like "12ب345" stays the tokens it was here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

from chatbot.retrieval.normalize import PERSIAN_STOPWORDS, index_form

_WORD = re.compile(r"[^\W_]+")
# Split letters from digits: "12ب345" and "ب۳۴۵" index "12", "ب", "345" alike, and "5pm" meets "5 pm".
_SCRIPT_RUN = re.compile(r"\d+|[^\W\d_]+")

ENGLISH_STOPWORDS = frozenset(
    """
    a an the and or but if of to in on at by for with from as is are was were be been being am do does did
    done have has had having i me my mine we us our you your yours he him his she her hers it its they them
    their what which who whom whose this that these those there here then than so not no yes can could will
    would shall should may might must about into over under again also just only very too any some all each
    both few more most other such own same how when where why up down out off once please thanks thank hi
    hello ok okay sure well get got let tell said say know think want need like now still yet
    """.split()
)
STOPWORDS = ENGLISH_STOPWORDS | PERSIAN_STOPWORDS
# Words of one letter carry no topic, except Persian plate letters between digits (kept: "ب").
_MIN_LETTERS = 2


def _stem(word: str) -> str:
    """Return an English word without a plural ending; Persian words come stemmed from index_form."""
    if not word.isascii() or len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """Return the text's search terms in order, repeats kept (their count is BM25's term frequency)."""
    out: list[str] = []
    for word in _WORD.findall(index_form(text)):
        for part in _SCRIPT_RUN.findall(word) if not word.isdigit() else [word]:
            if part in STOPWORDS or word in STOPWORDS:
                continue
            if part.isdigit():
                out.append(part.lstrip("0") or "0")
            elif len(part) >= _MIN_LETTERS or not part.isascii():
                out.append(_stem(part))
    return out


def tsvector_literal(found: Iterable[str]) -> str:
    """Return the terms as a tsvector literal with their positions ('plate':1,4 'garage':2)."""
    places: dict[str, list[int]] = {}
    for position, term in enumerate(found, start=1):
        # tsvector positions stop at 16383, and 256 positions per term are kept.
        places.setdefault(term, []).append(min(position, 16383))
    return " ".join(f"'{term}':{','.join(str(p) for p in spots[:256])}" for term, spots in places.items())


def tsquery_literal(weights: Mapping[str, float]) -> str:
    """Return an OR query over the terms (any of them matches; BM25 ranks the matches)."""
    return " | ".join(f"'{term}'" for term in weights)


def query_weights(question: str, context: Iterable[str], *, context_weight: float, limit: int) -> dict[str, float]:
    """Return the query's terms and weights: the question's at 1, the recent turns' lower.

    A follow-up ("and what was his plate?") names little of what it is about; the recent
    window names the rest. Its terms count for less, so a question naming its subject
    is not pulled off it by the conversation around it. At most `limit` terms, the
    question's first, then the context's most frequent.
    """
    weights: dict[str, float] = dict.fromkeys(terms(question), 1.0)
    counts = Counter(t for text in context for t in set(terms(text)) if t not in weights)
    for term, _ in counts.most_common():
        if len(weights) >= limit:
            break
        weights[term] = context_weight
    return dict(list(weights.items())[:limit])
