"""The HTML reader against web pages rendered from every corpus source, and against hostile ones.

Each source is put in a site's page (header, menu, cookie banner, scripts, styles, a
related-links aside, a newsletter form, a footer) in two layouts, HTML5 landmarks and bare
divs, and read back: the article's words, headings, items and tables, and almost none of
the site around it. Then the pages a reader must survive: one 50 MB line, tables nested 500
deep, elements nested past libxml2's depth, broken markup, and the encodings pages come in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from chatbot.documents.html import read_html
from chatbot.documents.model import Document, ListItem, Paragraph, ReadLimits, Table, Unreadable
from tests.fixtures.corpus.render_html import LAYOUTS, Layout, boilerplate_share, boilerplate_text, render_html
from tests.fixtures.corpus.script import numbered_items_of, source_language
from tests.fixtures.corpus.source import REPO, document_text, read_source, source_paths, word_recall, words

LIMITS = ReadLimits()
SOURCES = source_paths()
CASES = [(path, layout) for path in SOURCES for layout in LAYOUTS]


@dataclass(frozen=True)
class Pair:
    source: Document
    read: Document


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[Path, Layout], Pair]:
    """Render every source once in each layout and read it back."""
    folder = tmp_path_factory.mktemp("html")
    pairs = {}
    for index, (source_path, layout) in enumerate(CASES):
        source = read_source(source_path)
        page = render_html(source, numbered_items=numbered_items_of(source_path.read_text("utf-8")), layout=layout)
        path = folder / f"{index}-{source_path.stem}-{layout}.html"
        path.write_text(page, "utf-8")
        pairs[source_path, layout] = Pair(source, read_html(path, LIMITS))
    return pairs


def _case_name(case: tuple[Path, Layout]) -> str:
    return f"{case[0].relative_to(REPO)}-{case[1]}"


def _items(doc: Document) -> list[str]:
    return [b.text for s in doc.sections for b in s.blocks if isinstance(b, ListItem)]


def _tables(doc: Document) -> list[Table]:
    return [b for s in doc.sections for b in s.blocks if isinstance(b, Table)]


@pytest.mark.parametrize("case", CASES, ids=_case_name)
def test_the_article_is_read_whole_and_the_site_around_it_dropped(
    corpus: dict[tuple[Path, Layout], Pair], case: tuple[Path, Layout]
) -> None:
    pair = corpus[case]
    read_text, source_text = document_text(pair.read), document_text(pair.source)
    assert word_recall(source_text, read_text) >= 0.98
    assert boilerplate_share(read_text, source_text, boilerplate_text(pair.source)) < 0.02


@pytest.mark.parametrize("case", CASES, ids=_case_name)
def test_h1_to_h6_become_the_heading_paths(corpus: dict[tuple[Path, Layout], Pair], case: tuple[Path, Layout]) -> None:
    pair = corpus[case]
    assert [s.headings for s in pair.read.sections] == [s.headings for s in pair.source.sections]
    assert pair.read.title == pair.source.title
    assert pair.read.language == source_language(pair.source)


@pytest.mark.parametrize("case", CASES, ids=_case_name)
def test_li_are_items_and_table_rows_keep_their_header(
    corpus: dict[tuple[Path, Layout], Pair], case: tuple[Path, Layout]
) -> None:
    pair = corpus[case]
    assert _items(pair.read) == _items(pair.source)
    assert _tables(pair.read) == _tables(pair.source)


def _read_page(tmp_path: Path, markup: str | bytes, limits: ReadLimits = LIMITS) -> Document:
    path = tmp_path / "page.html"
    if isinstance(markup, str):
        path.write_text(markup, "utf-8")
    else:
        path.write_bytes(markup)
    return read_html(path, limits)


def _texts(doc: Document) -> list[str]:
    return [b.text for s in doc.sections for b in s.blocks if isinstance(b, Paragraph | ListItem)]


def test_a_page_that_marks_no_article_keeps_its_body_and_still_drops_the_menus(tmp_path: Path) -> None:
    page = _read_page(
        tmp_path,
        "<html><body><ul class='menu'><li>Home</li></ul><div role='navigation'>Products</div>"
        "<ul><li><a href='/'>Blog</a></li><li><a href='/c'>Careers</a></li></ul>"
        "<h2>Claims</h2><p>Call us within five days, or <a href='/claim'>claim online</a>.</p>"
        "<div id='footer'>Copyright</div></body></html>",
    )
    assert page.language is None
    assert [s.headings for s in page.sections] == [("Claims",)]
    assert _texts(page) == ["Call us within five days, or claim online."]


def test_items_keep_their_paragraphs_and_hidden_boxes_are_dropped(tmp_path: Path) -> None:
    page = _read_page(
        tmp_path,
        "<article><h2>Documents</h2><ul><li><p>Policy number</p></li><li>Licence<ul><li>front</li>"
        "<li>back</li></ul> both sides</li></ul><div style='display: none'>Subscribe now</div>"
        "<dl><dt>Excess</dt><dd>The part of a claim you pay.</dd></dl></article>",
    )
    assert _items(page) == ["Policy number", "Licence", "front", "back", "both sides"]
    assert _texts(page)[-2:] == ["Excess", "The part of a claim you pay."]
    assert "Subscribe" not in document_text(page)


def test_a_page_laid_out_in_a_table_is_read_as_a_page(tmp_path: Path) -> None:
    page = _read_page(
        tmp_path,
        "<html lang='fa'><body><table><tr><td><a href='/'>خانه</a></td><td><a href='/m'>محصولات</a></td></tr>"
        "<tr><td colspan='2'><h1>بیمه بدنه</h1><p>پوشش‌های اصلی:</p><ul><li>تصادف</li><li>سرقت</li></ul>"
        "<table><tr><th>پوشش</th><th>سقف</th></tr><tr><td>آتش‌سوزی</td><td>۱۰۰</td></tr></table>"
        "</td></tr></table></body></html>",
    )
    assert page.title == "بیمه بدنه"
    assert [s.headings for s in page.sections] == [("بیمه بدنه",)]
    assert _items(page) == ["تصادف", "سرقت"]
    assert _tables(page) == [Table(("پوشش", "سقف"), (("آتش‌سوزی", "۱۰۰"),))]
    assert "خانه" not in document_text(page)


def test_a_name_like_boilerplate_on_the_articles_wrapper_does_not_drop_the_article(tmp_path: Path) -> None:
    page = _read_page(
        tmp_path,
        "<html><body class='home has-sidebar cookies-not-set'><div class='content-with-sidebar'>"
        "<main><h1>Renewal</h1><p>Renew a month before the end date.</p>"
        "<div class='post-share'>Share on social media</div></main>"
        "<div class='sidebar-right'><p>Popular posts this week</p></div></div></body></html>",
    )
    assert [s.headings for s in page.sections] == [("Renewal",)]
    assert _texts(page) == ["Renew a month before the end date."]
    wrapped = _read_page(
        tmp_path, "<body><div class='layout-with-sidebar'><h2>Claims</h2><p>Call within five days.</p></div></body>"
    )
    assert _texts(wrapped) == ["Call within five days."]


def test_one_50_mb_line_is_read_in_bounded_time_and_memory(tmp_path: Path) -> None:
    paragraph = "<p>" + "بیمه‌نامه‌ها هزینه‌های کم‌ترین را پوشش می‌دهد " * 40 + "</p>"
    repeats = (50 * 1024 * 1024) // len(paragraph.encode("utf-8")) + 1
    path = tmp_path / "one-line.html"
    with path.open("w", encoding="utf-8") as out:
        out.write("<html lang='fa'><body><article>")
        for _ in range(repeats):  # not a loop that waits: it writes the page's one line in pieces
            out.write(paragraph)
        out.write("</article></body></html>")
    assert path.stat().st_size > 50 * 1024 * 1024
    with path.open("rb") as written:
        assert b"\n" not in written.read(1_000_000)
    page = read_html(path, LIMITS)
    assert sum(len(s.blocks) for s in page.sections) == repeats
    assert "کم‌ترین" in words(_texts(page)[0])


def test_a_line_of_millions_of_tags_is_refused_past_the_block_limit(tmp_path: Path) -> None:
    markup = "<html><body>" + "<p>word</p>" * 200_000 + "</body></html>"
    with pytest.raises(Unreadable) as refused:
        _read_page(tmp_path, markup, ReadLimits(max_blocks=10_000))
    assert refused.value.reason == "too_large"
    with pytest.raises(Unreadable) as refused:
        _read_page(tmp_path, "<div></div>" * 200_000, ReadLimits(max_elements=10_000))
    assert refused.value.reason == "too_complex"


def test_tables_nested_500_deep_are_too_complex(tmp_path: Path) -> None:
    nested = "<html><body>" + "<table><tr><td>" * 500 + "deep" + "</td></tr></table>" * 500 + "</body></html>"
    with pytest.raises(Unreadable) as refused:
        _read_page(tmp_path, nested)
    assert refused.value.reason == "too_complex"


def test_elements_nested_past_the_parsers_depth_are_too_complex_not_cut_short(tmp_path: Path) -> None:
    with pytest.raises(Unreadable) as refused:
        _read_page(tmp_path, "<html><body>" + "<div>" * 1000 + "deep" + "</div>" * 1000 + "</body></html>")
    assert refused.value.reason == "too_complex"
    shallow = _read_page(tmp_path, "<html><body>" + "<div>" * 100 + "deep" + "</div>" * 100 + "</body></html>")
    assert _texts(shallow) == ["deep"]


def test_a_table_nested_within_the_limit_is_read_into_its_cell(tmp_path: Path) -> None:
    page = _read_page(
        tmp_path,
        "<table><tr><th>Plan</th><th>Benefits</th></tr>"
        "<tr><td>Gold</td><td><table><tr><td>dental</td><td>optical</td></tr></table></td></tr></table>",
    )
    (table,) = _tables(page)
    assert table.header == ("Plan", "Benefits")
    assert table.rows == (("Gold", "dental optical"),)


def test_malformed_markup_is_repaired_not_refused(tmp_path: Path) -> None:
    page = _read_page(
        tmp_path,
        b"<html><body><h1>Claims<p>Report <b>the <i>loss</b> early</i><table><tr><td>Step<td>Days"
        b"<tr><td>Inspect<td>3</table><ul><li>photos<li>police report</ul><p>\xff\xfe stray bytes</div></span>",
    )
    assert page.title == "Claims"
    assert page.sections[0].headings == ("Claims",)
    assert _texts(page)[0] == "Report the loss early"
    assert _items(page) == ["photos", "police report"]
    assert _tables(page) == [Table(("Step", "Days"), (("Inspect", "3"),))]


def test_the_charset_comes_from_the_bom_or_the_meta_else_utf8(tmp_path: Path) -> None:
    text = "<html><head><title>پرداخت‌ها</title></head><body><p>کارت خودرو</p></body></html>"
    declared = text.replace("<head>", '<head><meta charset="windows-1256">')
    assert _texts(_read_page(tmp_path, declared.encode("cp1256"))) == ["کارت خودرو"]
    assert _read_page(tmp_path, b"\xef\xbb\xbf" + text.encode("utf-8")).title == "پرداخت‌ها"
    assert _read_page(tmp_path, b"\xff\xfe" + text.encode("utf-16-le")).title == "پرداخت‌ها"
    assert _texts(_read_page(tmp_path, text.encode("utf-8"))) == ["کارت خودرو"]
    xhtml = '<?xml version="1.0" encoding="windows-1256"?>' + text
    assert _texts(_read_page(tmp_path, xhtml.encode("cp1256"))) == ["کارت خودرو"]


def test_text_over_the_limit_is_too_large(tmp_path: Path) -> None:
    with pytest.raises(Unreadable) as refused:
        _read_page(tmp_path, "<p>" + "word " * 100 + "</p>", ReadLimits(max_text_chars=100))
    assert refused.value.reason == "too_large"
