"""PDFs the reader refuses (one clear line and its reason, before any text is read), and small ones it takes."""

from __future__ import annotations

import io
from pathlib import Path

import pypdf
import pypdfium2 as pdfium
import pytest
from fpdf import FPDF
from PIL import Image

from chatbot.documents.model import Document, Paragraph, ReadLimits, Section, Unreadable
from chatbot.documents.pdf import read_pdf
from tests.fixtures.corpus.render_pdf import shaped_pdf

TEXT = Document("Cover", None, (Section(("Cover",), (Paragraph("Fire, theft and flood are covered."),)),))


def _refused(path: Path, limits: ReadLimits | None = None) -> Unreadable:
    with pytest.raises(Unreadable) as refused:
        read_pdf(path, limits or ReadLimits())
    assert "\n" not in str(refused.value)
    return refused.value


def test_twenty_thousand_pages_are_refused_as_too_large(tmp_path: Path) -> None:
    document = pdfium.PdfDocument.new()
    for _ in range(20_000):
        document.new_page(100, 100).close()
    document.save(tmp_path / "long.pdf")
    document.close()
    refused = _refused(tmp_path / "long.pdf")
    assert refused.reason == "too_large"
    assert "20000 pages" in refused.detail


def test_a_file_over_the_byte_limit_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    path = shaped_pdf(TEXT, tmp_path / "text.pdf")
    refused = _refused(path, ReadLimits(max_bytes=1000))
    assert refused.reason == "too_large"


def test_a_password_protected_pdf_is_refused_as_encrypted(tmp_path: Path) -> None:
    writer = pypdf.PdfWriter(clone_from=shaped_pdf(TEXT, tmp_path / "open.pdf"))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="AES-256")
    writer.write(tmp_path / "locked.pdf")
    assert _refused(tmp_path / "locked.pdf").reason == "encrypted"


def test_a_scan_without_a_text_layer_needs_ocr(tmp_path: Path) -> None:
    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
        picture = io.BytesIO()
        Image.new("L", (200, 100), color=200).save(picture, format="PNG")
        pdf.image(picture, x=10, y=10, w=100)
    pdf.output(str(tmp_path / "scan.pdf"))
    refused = _refused(tmp_path / "scan.pdf")
    assert refused.reason == "scanned"
    assert "needs OCR" in refused.detail


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "no pages"])
def test_a_damaged_file_is_refused_as_corrupt(tmp_path: Path, damage: str) -> None:
    whole = shaped_pdf(TEXT, tmp_path / "whole.pdf").read_bytes()
    content = {
        "truncated": whole[: len(whole) // 3],
        "garbage": b"%PDF-1.7\n" + bytes(range(256)) * 40,
        "empty": b"",
        "no pages": _no_pages(),
    }[damage]
    (tmp_path / "bad.pdf").write_bytes(content)
    assert _refused(tmp_path / "bad.pdf").reason == "corrupt"


def _no_pages() -> bytes:
    buffer = io.BytesIO()
    pypdf.PdfWriter().write(buffer)
    return buffer.getvalue()


def test_a_readable_pdf_is_read(tmp_path: Path) -> None:
    read = read_pdf(shaped_pdf(TEXT, tmp_path / "text.pdf", header=None, footer=None), ReadLimits())
    assert read.sections[0].headings == ("Cover",)
    assert read.sections[0].blocks == (Paragraph("Fire, theft and flood are covered.", (1,)),)


def test_a_pdf_without_headings_takes_the_title_it_declares(tmp_path: Path) -> None:
    plain = Document(None, None, (Section((), (Paragraph("Fire, theft and flood are covered."),)),))
    writer = pypdf.PdfWriter(clone_from=shaped_pdf(plain, tmp_path / "plain.pdf", header=None, footer=None))
    writer.add_metadata({"/Title": "بیمه‌نامه آتش‌سوزی"})
    writer.write(tmp_path / "titled.pdf")
    read = read_pdf(tmp_path / "titled.pdf", ReadLimits())
    assert read.title == "بیمه‌نامه آتش‌سوزی"
    assert read.sections[0].headings == ()


def test_a_bold_line_of_a_standard_font_is_a_heading(tmp_path: Path) -> None:
    from reportlab.pdfgen.canvas import Canvas

    # Helvetica-Bold declares no weight: it is told by its name.
    canvas = Canvas(str(tmp_path / "standard.pdf"))
    canvas.setFont("Helvetica-Bold", 10)
    canvas.drawString(50, 700, "Exclusions")
    canvas.setFont("Helvetica", 10)
    canvas.drawString(50, 684, "War, nuclear risks and wear and tear are not covered by this policy at all.")
    canvas.save()
    read = read_pdf(tmp_path / "standard.pdf", ReadLimits())
    assert read.sections[0].headings == ("Exclusions",)
    assert read.sections[0].blocks[0] == Paragraph(
        "War, nuclear risks and wear and tear are not covered by this policy at all.", (1,)
    )
