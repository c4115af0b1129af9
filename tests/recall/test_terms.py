"""Recall's terms: Persian spelled as retrieval spells it, English stemmed, stop words out."""

from __future__ import annotations

from chatbot.recall.related import related_terms
from chatbot.recall.terms import MAX_TERM_BYTES, query_weights, terms, tsvector_literal


def test_persian_letters_digits_and_half_spaces_meet_one_spelling() -> None:
    # Arabic kaf and yeh, Arabic-Indic and Persian digits, a half-space or none.
    assert terms("پلاك ماشين ٤٧ط٨٢١") == terms("پلاک ماشین ۴۷ط۸۲۱") == terms("پلاک ماشین 47ط821")
    assert set(terms("بیمه نامه")) <= set(terms("بیمه‌نامه ام"))
    assert "821" in terms("پلاک ۴۷ط۸۲۱") and "47" in terms("پلاک ۴۷ط۸۲۱")


def test_english_words_meet_their_inflections_and_stop_words_go() -> None:
    assert terms("We agreed on the garages") == terms("agree garage")
    assert terms("What was the other driver's plate?") == ["driver", "plate"]
    assert terms("quoted") == terms("quote")


def test_the_tsvector_literal_keeps_each_term_once_with_its_positions() -> None:
    assert tsvector_literal(["plate", "garage", "plate"]) == "'plate':1,3 'garage':2"


def test_a_query_weighs_the_question_over_related_words_and_the_recent_turns() -> None:
    query = query_weights(
        "When was the crash?", ["Which garage did we agree on?"], context_weight=0.3, limit=32, related=related_terms
    )
    assert query["crash"] == 1.0 and query["accident"] == 0.5 and query[terms("garage")[0]] == 0.3
    assert "crash" not in related_terms(["crash"])


def test_a_persian_word_with_an_ending_meets_the_word_without_it() -> None:
    # "my car", "their price", "a garage" against "car", "price", "garage": the ending is added beside, not cut.
    assert "ماشین" in terms("ماشینم کجاست؟") and "ماشینم" in terms("ماشینم کجاست؟")
    assert "قیمت" in terms("قیمتشان چند بود؟")
    assert "تعمیرگاه" in terms("اسم تعمیرگاهی که گفتم")
    assert "پیام" in terms("پیام")  # a word whose last letter looks like an ending keeps its form


def test_related_words_are_of_the_asking_words_script_and_may_is_a_month() -> None:
    query = query_weights("تصادف چه تاریخی بود؟", [], context_weight=0.3, limit=32, related=related_terms)
    assert "فروردین" in query and "اسفند" in query  # not crowded out by the English month names
    assert all(not term.isascii() for term in query)
    assert "may" in terms("It was on the 2nd of May.")


def test_a_term_is_cut_to_what_postgres_stores_at_a_letter_boundary() -> None:
    # Persian letters are two bytes: 1,030 of them are 2,060, cut to 1,023 whole letters.
    (laughter,) = set(terms("خ" * 1030))
    assert laughter == "خ" * (MAX_TERM_BYTES // 2) and len(laughter.encode()) <= MAX_TERM_BYTES
    assert terms("a" * 8000) == ["a" * MAX_TERM_BYTES] and terms("z" * 2045) == ["z" * 2045]
    # The question's terms are cut the same way, so the cut word finds its turn.
    assert set(query_weights("b" * 5000, [], context_weight=0.3, limit=32)) == set(terms("b" * 5000))
    assert tsvector_literal(["c" * 3000]) == f"'{'c' * MAX_TERM_BYTES}':1"
