"""Search normalisation: every spelling of a Persian word meets the same index entry."""

from __future__ import annotations

import pytest

from chatbot.retrieval.chunking import split_document
from chatbot.retrieval.normalize import detect_language, index_form, query_form, query_words, search_form


def test_arabic_letter_forms_fold_to_persian() -> None:
    assert search_form("بيمه تكميلي") == search_form("بیمه تکمیلی") == "بیمه تکمیلی"


def test_persian_and_arabic_digits_fold_to_ascii() -> None:
    assert search_form("۳۰ روز") == search_form("٣٠ روز") == search_form("30 روز") == "30 روز"


@pytest.mark.parametrize("spelling", ["می‌خواهم", "میخواهم", "می خواهم", "مي‌خواهم"])
def test_zero_width_non_joiner_spellings_meet(spelling: str) -> None:
    assert search_form(spelling) == "میخواهم"


def test_compound_parts_are_indexed_too() -> None:
    words = index_form("بیمه‌نامه‌ها").split()
    assert {"بیمهنامهها", "بیمه", "نامه", "بیمهنامه"} <= set(words)


def test_plural_typed_with_a_space_is_joined() -> None:
    assert search_form("خسارت ها") == search_form("خسارت‌ها") == "خسارتها"


def test_query_drops_persian_function_words() -> None:
    assert query_form("برای لغو بیمه‌نامه بدنه چه کار کنم؟").split()[:2] == ["لغو", "بیمهنامه"]
    assert "چه" not in query_form("برای لغو بیمه‌نامه بدنه چه کار کنم؟").split()


def test_query_words_keep_each_word_with_its_other_forms() -> None:
    # One entry per word as written: a plural with its stem, a compound with its parts.
    assert query_words("بیمه عمر چه طرح‌هایی دارد؟") == ["بیمه", "عمر", "طرحهایی طرح"]
    assert query_words("برای لغو بیمه‌نامه بدنه چه کار کنم؟") == ["لغو", "بیمهنامه بیمه نامه", "بدنه"]
    # Together they are the query form, word for word.
    for text in ["بیمه عمر چه طرح‌هایی دارد؟", "بیمه‌نامه‌هایم کجاست", "How do I file a Car-Body claim?"]:
        assert set(" ".join(query_words(text)).split()) == set(query_form(text).split())


def test_english_is_lowercased_and_split_on_punctuation() -> None:
    assert query_form("How do I file a Car-Body claim?") == "how do i file a car body claim"


def test_language_detection() -> None:
    assert detect_language("بیمه بدنه چیست؟") == "fa"
    assert detect_language("What is car body insurance?") == "en"


def test_splitter_keeps_the_zero_width_non_joiner() -> None:
    text = "# لغو بیمه‌نامه\n\n## مهلت\n\nمی‌توانید بیمه‌نامه را لغو کنید."
    chunks = split_document("fa/x.md", "لغو بیمه‌نامه", text)
    assert [c.text for c in chunks] == ["می‌توانید بیمه‌نامه را لغو کنید."]
    assert chunks[0].title == "لغو بیمه‌نامه › مهلت"


def test_chunk_ids_are_content_derived() -> None:
    text = "# Doc\n\n## A\n\nFirst section.\n\n## B\n\nSecond section."
    first = split_document("doc.md", "Doc", text)
    again = split_document("doc.md", "Doc", text.replace("Second section.", "Changed section."))
    assert first[0].chunk_id == again[0].chunk_id
    assert first[1].chunk_id != again[1].chunk_id
    assert all(c.chunk_id.startswith("doc.md#") for c in first)
