"""Search normalisation: one spelling for documents and queries, in Persian and English.

Postgres does the tokenising and (for English) the stemming; this module makes sure
both sides reach it spelled the same way. Persian needs more than letter folding:

* Arabic yeh/kaf (ي ك), Persian or Arabic-Indic digits and diacritics fold to one form
  (`chatbot.text.normalize_persian`).
* The zero-width non-joiner is written, dropped or typed as a space by different people:
  "می‌خواهم", "میخواهم" and "می خواهم" are one word. The canonical form joins the
  parts; the index form also carries the parts on their own, so a query that spells a
  compound with a space ("بیمه نامه") still meets a document that used the joiner.
* The verb prefix "می"/"نمی" and the plural suffixes "ها"/"های" typed as separate words
  are glued back on, and plural forms also index their stem ("خسارتها" -> "خسارت"),
  a light stemmer that the `simple` text-search configuration lacks.
"""

from __future__ import annotations

import re

from chatbot.text import looks_persian, normalize_persian

ZWNJ = "\u200c"

# Search configurations per document language: English gets Snowball stemming and
# stop words; Persian has no Postgres dictionary, so `simple` over normalised text.
TS_CONFIGS = {"en": "english", "fa": "simple"}

_PREFIX_SPACE = re.compile(r"(?<!\S)(ن?می) +(?=\w)")
_SUFFIX_SPACE = re.compile(r"(?<=\w) +(ها|های|هایی|هایم|هایت|هایش|ترین)(?!\S)")
_PLURAL = re.compile(r"^(\w{2,}?)(هایی|هایم|هایت|هایش|های|ها)$")
# `\w` covers Arabic-script letters and digits but not ZWNJ or Arabic punctuation (، ؛ ؟).
_WORD = re.compile(r"\w+")

# Function words that carry no topic: kept out of Persian queries because the `simple`
# configuration has no stop-word list, and one of them would otherwise match every chunk.
# Written in the folded form (no ZWNJ, Persian yeh/kaf).
PERSIAN_STOPWORDS = frozenset(
    """
    و در به از که این آن را با برای است هست نیست بود شد شود میشود میشه می نمی یک تا هم یا اگر
    چه چی چطور چگونه چرا کجا کی کدام آیا چند چقدر چیست چیه باید من ما شما تو او آنها ایشان خود
    بر بی پس نیز اما ولی هر همه دیگر روی زیر کنم کنیم کنید کند کنند کرد کردم کرده بکنم بکنیم
    دارم دارد داریم دارید هستم هستیم هستند باشد باشم بشود شده میتوانم میتوانیم میتوان میتونم
    لطفا سلام ای اینکه آنکه کار باید بگویید بگو بدانم میخواهم میخوام خواهش ممنون مرسی ام ایم
    اید اند
    """.split()
)


def detect_language(text: str) -> str:
    """Return "fa" when the text is mostly Arabic script, else "en"."""
    return "fa" if looks_persian(text) else "en"


def ts_config(language: str) -> str:
    """Return the Postgres text-search configuration for a language code."""
    return TS_CONFIGS.get(language, "simple")


def _fold(text: str) -> str:
    text = normalize_persian(text).casefold()
    text = _PREFIX_SPACE.sub(r"\1", text)
    return _SUFFIX_SPACE.sub(r"\1", text)


def search_form(text: str) -> str:
    """Return the canonical search spelling of `text` (ZWNJ compounds joined, folded, lowercased)."""
    return _fold(text)


def _extra_terms(text: str) -> list[str]:
    """Return the parts of ZWNJ compounds and the stems of plural words, for recall."""
    extras: list[str] = []
    # The joiner as a word boundary: "بیمه‌نامه" also yields "بیمه" and "نامه".
    for word in text.split():
        if ZWNJ in word:
            extras.extend(_WORD.findall(_fold(word.replace(ZWNJ, " "))))
    for word in [*_WORD.findall(_fold(text)), *extras]:
        match = _PLURAL.match(word)
        if match:
            extras.append(match.group(1))
    return extras


def index_form(text: str) -> str:
    """Return the text a document chunk's tsvector is built from: canonical form plus extras."""
    canonical = search_form(text)
    present = set(_WORD.findall(canonical))
    extras = [w for w in dict.fromkeys(_extra_terms(text)) if w not in present]
    return f"{canonical}\n{' '.join(extras)}" if extras else canonical


def query_form(text: str) -> str:
    """Return the query text to search with: index form minus Persian stop words."""
    words = _WORD.findall(index_form(text))
    kept = [w for w in words if w not in PERSIAN_STOPWORDS]
    return " ".join(dict.fromkeys(kept))


def query_words(text: str) -> list[str]:
    """Return the query's words, each with the other forms it is searched by, minus stop words.

    One string per word as the user wrote it: its canonical form, then the parts of a ZWNJ
    compound and plural stems ("طرح‌هایی" -> "طرحهایی طرح"). Search counts a word once,
    found when the chunk holds any of its forms, so a form the tenant lacks ("طرحهایی")
    is no unseen word beside the one it has ("طرح"). The words together are `query_form`.
    """
    parts: dict[str, list[str]] = {}
    for token in text.split():
        if ZWNJ in token and len(whole := _WORD.findall(_fold(token))) == 1:
            parts.setdefault(whole[0], []).extend(_WORD.findall(_fold(token.replace(ZWNJ, " "))))
    groups: dict[str, list[str]] = {}
    for word in _WORD.findall(search_form(text)):
        forms = [word, *parts.get(word, [])]
        forms += [match.group(1) for form in forms if (match := _PLURAL.match(form))]
        kept = [form for form in dict.fromkeys(forms) if form not in PERSIAN_STOPWORDS]
        if kept and word not in groups:
            groups[word] = kept
    return [" ".join(forms) for forms in groups.values()]
