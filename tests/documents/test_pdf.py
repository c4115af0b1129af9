"""The PDF reader against the corpus rendered both ways Persian PDFs are made (shaped and legacy).

Every source document (the demo knowledge base and the corpus' extra sources) is rendered once
per module, read back, and held against the text it was made from.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pypdf
import pytest

from chatbot.documents.model import Document, ListItem, Paragraph, ReadLimits, Section, Table
from chatbot.documents.pdf import read_pdf
from tests.fixtures.corpus.render_pdf import legacy_pdf, shaped_pdf
from tests.fixtures.corpus.source import document_text, read_source, source_paths, word_recall, words

KINDS = {"shaped": shaped_pdf, "legacy": legacy_pdf}
SOURCES = source_paths()


@dataclass(frozen=True)
class Rendered:
    source: Document
    read: Document
    path: Path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Rendered]:
    folder = tmp_path_factory.mktemp("pdf-corpus")
    rendered = {}
    for source_path in SOURCES:
        source = read_source(source_path)
        name = f"{source_path.parent.name}-{source_path.stem}"
        for kind, render in KINDS.items():
            path = render(source, folder / f"{name}-{kind}.pdf")
            rendered[(kind, name)] = Rendered(source, read_pdf(path, ReadLimits()), path)
    return rendered


CASES = [(kind, f"{p.parent.name}-{p.stem}") for kind in KINDS for p in SOURCES]
IDS = [f"{kind}-{name}" for kind, name in CASES]

# A known miss: the ZWNJ of پاسخ‌گویی in a bold heading. No glyph shows it (the bold font's
# word-end خ has not been seen yet when the heading is read) and no affix rule covers it.
_HEADING_ZWNJ_MISSES = {"sources-fa-porsesh-motadavel"}


def _marked(cases: list[tuple[str, str]], missing: set[str]) -> list[object]:
    reason = "a ZWNJ in a bold heading that neither the glyphs nor the affix rule show"
    return [
        pytest.param(kind, name, id=f"{kind}-{name}", marks=pytest.mark.xfail(strict=True, reason=reason))
        if name in missing
        else pytest.param(kind, name, id=f"{kind}-{name}")
        for kind, name in cases
    ]


@pytest.mark.parametrize(("kind", "name"), CASES, ids=IDS)
def test_words_are_recovered_with_their_zwnj(corpus, kind: str, name: str) -> None:
    case = corpus[(kind, name)]
    recall = word_recall(document_text(case.source), document_text(case.read))
    missing = Counter(words(document_text(case.source))) - Counter(words(document_text(case.read)))
    assert recall >= 0.98, f"{recall:.3f}, missing {sorted(missing)[:10]}"


@pytest.mark.parametrize(("kind", "name"), _marked(CASES, _HEADING_ZWNJ_MISSES))
def test_headings_become_section_titles(corpus, kind: str, name: str) -> None:
    case = corpus[(kind, name)]
    assert [s.headings for s in case.read.sections] == [s.headings for s in case.source.sections]
    assert case.read.title == case.source.title


@pytest.mark.parametrize(("kind", "name"), CASES, ids=IDS)
def test_running_header_and_page_numbers_are_dropped(corpus, kind: str, name: str) -> None:
    case = corpus[(kind, name)]
    pages = len(pypdf.PdfReader(case.path).pages)
    text = document_text(case.read)
    assert "Acme Insurance |" not in text and "بیمه آکمه |" not in text
    source = document_text(case.source)
    assert text.count("Page ") == source.count("Page ") and text.count("صفحه ") == source.count("صفحه ")
    assert case.read.skipped_repeats == 2 * pages  # a header and a footer on every page
    assert case.read.paged


@pytest.mark.parametrize(("kind", "name"), CASES, ids=IDS)
def test_paragraphs_items_and_tables_come_back_as_written(corpus, kind: str, name: str) -> None:
    case = corpus[(kind, name)]

    def blocks(doc: Document) -> list[tuple[str, ...]]:
        return [
            (type(b).__name__, *b.header, *(c for row in b.rows for c in row))
            if isinstance(b, Table)
            else (type(b).__name__,)
            for s in doc.sections
            for b in s.blocks
        ]

    # Every block of its kind and in its place (paragraphs re-flowed over lines and pages,
    # list items apart from the paragraph after them), every table cell under its header.
    assert blocks(case.read) == blocks(case.source)


def test_zwnj_is_rarely_inserted_where_the_source_has_none(corpus) -> None:
    false, zwnj_words = 0, 0
    for case in corpus.values():
        source = Counter(w for w in words(document_text(case.source)) if "\u200c" in w)
        read = Counter(w for w in words(document_text(case.read)) if "\u200c" in w)
        zwnj_words += sum(source.values())
        false += sum((read - source).values())
    assert zwnj_words > 100
    assert false <= 0.02 * zwnj_words, f"{false} words with a ZWNJ the source does not have"


@pytest.mark.parametrize(("kind", "name"), [c for c in CASES if c[1].startswith("en-")], ids=str)
def test_blocks_carry_the_pages_they_are_on(corpus, kind: str, name: str) -> None:
    case = corpus[(kind, name)]
    # pypdf reads each page on its own: a block's first and last words are on its first and last page.
    pages = pypdf.PdfReader(case.path).pages
    page_text = [" ".join(words(unicodedata.normalize("NFKC", p.extract_text()).replace("-\n", ""))) for p in pages]
    for section in case.read.sections:
        for block in section.blocks:
            if isinstance(block, Table):
                continue
            block_words = words(block.text)
            assert block.pages == tuple(range(block.pages[0], block.pages[-1] + 1))
            assert block_words[0] in page_text[block.pages[0] - 1]
            assert block_words[-1] in page_text[block.pages[-1] - 1]


def _structure(persian: bool) -> Document:
    """A document with every block kind, its table long enough to run over a page."""
    if persian:
        title, sub, third = "شرایط عمومی بیمه‌نامه", "پوشش‌ها", "جدول خسارت‌ها"
        notes, exclusions = "یادداشت‌ها", "استثناها"
        para = "این بیمه‌نامه خسارت‌های وارد شده به خودرو را جبران می‌کند و در «شرایط خصوصی» آمده است."
        items = ("آتش‌سوزی و انفجار", "سرقت کلی خودرو (با گزارش پلیس)")
        header = ("نوع خسارت", "سقف پرداخت", "فرانشیز")
        rows = tuple((f"خسارت نوع {n}", f"{n}۰۰ میلیون تومان", f"{n}۰ درصد") for n in "۱۲۳۴۵۶۷۸۹")
    else:
        title, sub, third = "General conditions of the policy", "Covers", "Claims table"
        notes, exclusions = "Notes", "Exclusions"
        para = "This policy pays for damage to the insured car, whoever was at fault, as the schedule says."
        items = ("Fire and explosion", "Theft of the whole car (with a police report)")
        header = ("Claim type", "Limit", "Excess")
        rows = tuple((f"Claim kind {n}", f"{n}00 million", f"{n}0 percent") for n in "123456789")
    table_rows = rows * 2
    return Document(
        title,
        None,
        (
            Section((title,), (Paragraph(para),)),
            Section((title, sub), (ListItem(items[0]), ListItem(items[1]), Paragraph(para))),
            Section((title, third), (Table(header, table_rows), Paragraph(para))),
            # A fourth-level heading is drawn bold at barely more than the body size: read by its weight.
            Section((title, third, notes, exclusions), (Paragraph(para),)),
        ),
    )


@pytest.fixture(scope="module")
def structures(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], tuple[Document, Document]]:
    folder = tmp_path_factory.mktemp("pdf-structure")
    found = {}
    for kind, render in KINDS.items():
        for persian in (False, True):
            source = _structure(persian)
            path = render(source, folder / f"{kind}-{persian}.pdf")
            found[(kind, persian)] = (source, read_pdf(path, ReadLimits()))
    return found


STRUCTURE_CASES = [(kind, persian) for kind in KINDS for persian in (False, True)]
STRUCTURE_IDS = [f"{kind}-{'fa' if persian else 'en'}" for kind, persian in STRUCTURE_CASES]


@pytest.mark.parametrize(("kind", "persian"), STRUCTURE_CASES, ids=STRUCTURE_IDS)
def test_a_table_keeps_its_rows_under_their_header_across_pages(structures, kind: str, persian: bool) -> None:
    source, read = structures[(kind, persian)]
    want = next(b for s in source.sections for b in s.blocks if isinstance(b, Table))
    tables = [b for s in read.sections for b in s.blocks if isinstance(b, Table)]
    assert len(tables) == 1
    assert tables[0].header == want.header
    assert tables[0].rows == want.rows
    assert tables[0].row_lines()[0] == want.row_lines()[0]
    assert len(tables[0].pages) >= 2


@pytest.mark.parametrize(("kind", "persian"), STRUCTURE_CASES, ids=STRUCTURE_IDS)
def test_every_block_is_read_as_written(structures, kind: str, persian: bool) -> None:
    source, read = structures[(kind, persian)]
    assert [s.headings for s in read.sections] == [s.headings for s in source.sections]
    for got, want in zip(read.sections, source.sections, strict=True):
        assert [type(b) for b in got.blocks] == [type(b) for b in want.blocks]
        for got_block, want_block in zip(got.blocks, want.blocks, strict=True):
            if not isinstance(want_block, Table):
                assert isinstance(got_block, Paragraph | ListItem)
                assert got_block.text == want_block.text
            assert got_block.pages and got_block.pages[0] >= 1


HARD_PERSIAN = (
    "حرفه‌ای موفق‌ترین میلادی لالیگا فلسفهٔ «بیمه‌نامه» (سیل) می‌شود نمی‌کند کتاب‌ها بزرگ‌تر "
    "خانه‌ام رئیس مسئول سؤال ۱۲۳ ٤٥٦ گفت‌وگو"
)


@pytest.mark.parametrize("kind", list(KINDS))
def test_persian_is_read_in_logical_order_as_letters(tmp_path: Path, kind: str) -> None:
    source = Document("آزمون", None, (Section(("آزمون",), (Paragraph(HARD_PERSIAN),)),))
    read = read_pdf(KINDS[kind](source, tmp_path / "hard.pdf"), ReadLimits())
    paragraph = read.sections[0].blocks[0]
    assert isinstance(paragraph, Paragraph)
    # ZWNJ, lam-alef, the hamza on its letter, guillemets and parentheses the right way round,
    # Persian and Arabic-Indic digits as written, and no presentation form left.
    assert paragraph.text == HARD_PERSIAN


MIXED_PERSIAN = (
    "با شماره 021-4000-2000 تماس بگیرید یا به www.acme.example/claims بروید؛ تاریخ 2024/05/01 و "
    "ACME Insurance Company در تهران، نسخه v1.2 است. سقف پرداخت ۱۰ تا ۲۰ درصد (حداکثر ۵٬۰۰۰٬۰۰۰ تومان) است."
)
MIXED_ENGLISH = "The word بیمه‌نامه means policy, and سال 2024 is a year (see page 4)."


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("shaped", MIXED_PERSIAN),
        ("legacy", MIXED_PERSIAN),
        # fpdf2 draws a Persian word with a ZWNJ inside an English line in the wrong order itself.
        ("legacy", MIXED_ENGLISH),
    ],
    ids=["shaped-persian", "legacy-persian", "legacy-english"],
)
def test_mixed_lines_are_read_in_logical_order(tmp_path: Path, kind: str, text: str) -> None:
    source = Document("Mixed", None, (Section(("Mixed",), (Paragraph(text),)),))
    read = read_pdf(KINDS[kind](source, tmp_path / "mixed.pdf"), ReadLimits())
    paragraph = read.sections[0].blocks[0]
    assert isinstance(paragraph, Paragraph)
    # Latin words, addresses and numbers keep their order inside Persian, and Persian inside English.
    assert paragraph.text == text


def test_english_ligatures_are_unfolded_and_hyphenation_joined(corpus) -> None:
    ligatured = [c for (kind, name), c in corpus.items() if kind == "legacy" and name.startswith("en-")]
    raw = "".join(page.extract_text() for c in ligatured for page in pypdf.PdfReader(c.path).pages)
    assert "\ufb01" in raw  # the legacy renderer drew ﬁ as one character
    hyphenated = [w for c in ligatured for w in words(document_text(c.source)) if w not in raw]
    assert hyphenated  # some words were broken over two lines
    for case in ligatured:
        read = document_text(case.read)
        assert "\ufb01" not in read and "\ufb02" not in read
        assert not [w for w in words(read) if w.endswith("-") or w not in words(document_text(case.source))]
