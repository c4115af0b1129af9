"""The DOCX reader against Word files rendered from every corpus source, and against hostile ones.

Each source (the demo knowledge base and tests/fixtures/corpus/sources) is written as Word
writes it, Persian right to left, and read back: the words, the heading path, the list items
and the tables must be the source's. Then the files a reader must refuse: a zip bomb, an
encrypted file, corrupt and truncated packages, tables nested 500 deep.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import docx
import pytest
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from msoffcrypto.format.ooxml import OOXMLFile

from chatbot.documents.docx import read_docx
from chatbot.documents.model import Document, ListItem, ReadLimits, Table, Unreadable
from tests.fixtures.corpus.render_docx import render_docx
from tests.fixtures.corpus.script import numbered_items_of, source_language
from tests.fixtures.corpus.source import REPO, document_text, read_source, source_paths, word_recall

LIMITS = ReadLimits()
SOURCES = source_paths()


@dataclass(frozen=True)
class Pair:
    source: Document
    read: Document
    path: Path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Pair]:
    """Render every source once as a DOCX and read it back."""
    folder = tmp_path_factory.mktemp("docx")
    pairs = {}
    for index, source_path in enumerate(SOURCES):
        source = read_source(source_path)
        numbered = numbered_items_of(source_path.read_text("utf-8"))
        path = render_docx(source, folder / f"{index}-{source_path.stem}.docx", numbered_items=numbered)
        pairs[source_path] = Pair(source, read_docx(path, LIMITS), path)
    return pairs


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


def _items(doc: Document) -> list[str]:
    return [b.text for s in doc.sections for b in s.blocks if isinstance(b, ListItem)]


def _tables(doc: Document) -> list[Table]:
    return [b for s in doc.sections for b in s.blocks if isinstance(b, Table)]


@pytest.mark.parametrize("source_path", SOURCES, ids=_name)
def test_every_word_of_the_source_is_read_back_with_its_zwnj(corpus: dict[Path, Pair], source_path: Path) -> None:
    pair = corpus[source_path]
    assert word_recall(document_text(pair.source), document_text(pair.read)) >= 0.98


@pytest.mark.parametrize("source_path", SOURCES, ids=_name)
def test_heading_styles_become_the_sections_heading_paths(corpus: dict[Path, Pair], source_path: Path) -> None:
    pair = corpus[source_path]
    assert [s.headings for s in pair.read.sections] == [s.headings for s in pair.source.sections]
    assert pair.read.title == pair.source.title


@pytest.mark.parametrize("source_path", SOURCES, ids=_name)
def test_list_paragraphs_are_items_and_tables_keep_their_header(corpus: dict[Path, Pair], source_path: Path) -> None:
    pair = corpus[source_path]
    assert _items(pair.read) == _items(pair.source)
    assert _tables(pair.read) == _tables(pair.source)
    for table in _tables(pair.read):
        for line, row in zip(table.row_lines(), table.rows, strict=True):
            assert line.startswith(f"{table.header[0]}: {row[0]}")


@pytest.mark.parametrize("source_path", SOURCES, ids=_name)
def test_the_declared_run_language_is_the_documents(corpus: dict[Path, Pair], source_path: Path) -> None:
    pair = corpus[source_path]
    assert pair.read.language == source_language(pair.source)


def test_a_paragraph_numbered_by_word_outside_a_list_style_is_an_item(tmp_path: Path) -> None:
    # Word itself numbers a list as "List Paragraph" plus a numbering reference, not a List style
    out = docx.Document()
    out.add_paragraph("Claims", style="Title")
    item = out.add_paragraph("Report the loss within five days", style="List Paragraph")
    numbering = OxmlElement("w:numPr")
    for name, value in (("w:ilvl", "0"), ("w:numId", "1")):
        element = OxmlElement(name)
        element.set(qn("w:val"), value)
        numbering.append(element)
    item._p.get_or_add_pPr().append(numbering)
    out.add_paragraph("An indented note", style="List Paragraph")
    out.save(str(tmp_path / "numbered.docx"))
    read = read_docx(tmp_path / "numbered.docx", LIMITS)
    assert read.title == "Claims"
    assert read.sections[0].headings == ("Claims",)
    assert _items(read) == ["Report the loss within five days"]


def test_merged_cells_stand_in_each_column_and_row_they_cover(tmp_path: Path) -> None:
    out = docx.Document()
    grid = out.add_table(rows=3, cols=3)
    grid.cell(0, 0).text = "Cover"
    grid.cell(0, 1).merge(grid.cell(0, 2)).text = "Limit"
    grid.cell(1, 0).merge(grid.cell(2, 0)).text = "Fire"
    for row, (low, high) in ((1, ("10", "20")), (2, ("30", "40"))):
        grid.cell(row, 1).text = low
        grid.cell(row, 2).text = high
    out.save(str(tmp_path / "merged.docx"))
    (table,) = _tables(read_docx(tmp_path / "merged.docx", LIMITS))
    assert table.header == ("Cover", "Limit", "Limit")
    assert table.rows == (("Fire", "10", "20"), ("Fire", "30", "40"))


def test_a_table_nested_within_the_limit_is_read_into_its_cell(tmp_path: Path) -> None:
    out = docx.Document()
    grid = out.add_table(rows=2, cols=1)
    grid.cell(0, 0).text = "Benefits"
    inner = grid.cell(1, 0).add_table(rows=1, cols=2)
    inner.cell(0, 0).text = "dental"
    inner.cell(0, 1).text = "optical"
    out.save(str(tmp_path / "nested.docx"))
    (table,) = _tables(read_docx(tmp_path / "nested.docx", LIMITS))
    assert table.header == ("Benefits",)
    assert "dental optical" in table.rows[0][0]


def _nested_tables(path: Path, depth: int) -> Path:
    out = docx.Document()
    cell = out.add_table(rows=1, cols=1).cell(0, 0)
    for _ in range(depth - 1):
        cell = cell.add_table(rows=1, cols=1).cell(0, 0)
    cell.text = "innermost"
    out.save(str(path))
    return path


def test_tables_nested_500_deep_are_too_complex(tmp_path: Path) -> None:
    with pytest.raises(Unreadable) as refused:
        read_docx(_nested_tables(tmp_path / "deep.docx", 500), LIMITS)
    assert refused.value.reason == "too_complex"
    with pytest.raises(Unreadable) as refused:
        read_docx(_nested_tables(tmp_path / "just-over.docx", 5), ReadLimits(max_nesting=4))
    assert refused.value.reason == "too_complex"


def test_a_zip_bomb_is_refused_before_it_unpacks(corpus: dict[Path, Pair], tmp_path: Path) -> None:
    plain = next(iter(corpus.values())).path
    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as out:
        for part in source.infolist():
            out.writestr(part, source.read(part))
        with out.open("word/media/padding.bin", "w", force_zip64=True) as padding:
            zeros = b"\0" * (1 << 20)
            for _ in range(24):
                padding.write(zeros)
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(Unreadable) as refused:
        read_docx(bomb, ReadLimits(max_unpacked_bytes=16 << 20))
    assert refused.value.reason == "too_large"
    # under every total, but a part a thousand times its packed size: a bomb all the same
    with pytest.raises(Unreadable) as refused:
        read_docx(bomb, LIMITS)
    assert refused.value.reason == "too_large"


def test_a_password_protected_word_file_is_encrypted(corpus: dict[Path, Pair], tmp_path: Path) -> None:
    sealed = io.BytesIO()
    with next(iter(corpus.values())).path.open("rb") as plain:
        OOXMLFile(plain).encrypt("secret", sealed)
    (tmp_path / "sealed.docx").write_bytes(sealed.getvalue())
    with pytest.raises(Unreadable) as refused:
        read_docx(tmp_path / "sealed.docx", LIMITS)
    assert refused.value.reason == "encrypted"


def test_broken_packages_are_corrupt(corpus: dict[Path, Pair], tmp_path: Path) -> None:
    plain = next(iter(corpus.values())).path
    whole = plain.read_bytes()
    (tmp_path / "text.docx").write_text("not a word file at all", "utf-8")
    (tmp_path / "truncated.docx").write_bytes(whole[: len(whole) // 2])
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(tmp_path / "bad-xml.docx", "w") as out:
        for part in source.infolist():
            data = source.read(part)
            out.writestr(part, data[: len(data) // 2] if part.filename == "word/document.xml" else data)
    with zipfile.ZipFile(tmp_path / "no-body.docx", "w") as out:
        out.writestr("[Content_Types].xml", "<Types/>")
    for name in ("text.docx", "truncated.docx", "bad-xml.docx", "no-body.docx"):
        with pytest.raises(Unreadable) as refused:
            read_docx(tmp_path / name, LIMITS)
        assert refused.value.reason == "corrupt", name


def test_a_body_in_another_namespace_is_unsupported_not_read_empty(corpus: dict[Path, Pair], tmp_path: Path) -> None:
    # Strict Open XML names every element in another namespace: read as transitional, nothing would be found
    plain = next(iter(corpus.values())).path
    strict = tmp_path / "strict.docx"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(strict, "w") as out:
        for part in source.infolist():
            data = source.read(part)
            if part.filename == "word/document.xml":
                data = data.replace(
                    b"http://schemas.openxmlformats.org/wordprocessingml/2006/main",
                    b"http://purl.oclc.org/ooxml/wordprocessingml/main",
                )
            out.writestr(part, data)
    with pytest.raises(Unreadable) as refused:
        read_docx(strict, LIMITS)
    assert refused.value.reason == "unsupported"


def test_text_over_the_limit_is_too_large(corpus: dict[Path, Pair]) -> None:
    path = next(iter(corpus.values())).path
    with pytest.raises(Unreadable) as refused:
        read_docx(path, ReadLimits(max_text_chars=100))
    assert refused.value.reason == "too_large"
