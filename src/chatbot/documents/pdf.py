"""Read a PDF's text layer into a `Document`, Persian and English alike.

PDFium (pypdfium2) reads the text: it gives every character in logical order with its ink
box, which is what the Persian repairs need (`_persian.py`), and it reads both shaped and
legacy Persian PDFs (docs/measurements/pdf-extraction.md has the figures against pdfminer.six
and pypdf). Pages are read one at a time and released, so memory stays flat however long the
file. What cannot be read is refused with `Unreadable` before any text is taken: too many
pages, a password, no text layer at all (a scan), or a file PDFium cannot parse.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from chatbot.documents._pdf_layout import build_document
from chatbot.documents._pdf_page import PageText, read_page
from chatbot.documents._persian import LetterForms
from chatbot.documents.model import Document, ReadLimits, Unreadable


def read_pdf(path: Path, limits: ReadLimits) -> Document:
    """Read the PDF at `path` within `limits`; raise `Unreadable` for a file that is not taken."""
    size = path.stat().st_size
    if size > limits.max_bytes:
        raise Unreadable("too_large", f"{size} bytes, over the limit of {limits.max_bytes}")
    started = time.monotonic()
    document = _open(path)
    try:
        count = len(document)
        if count == 0:
            raise Unreadable("corrupt", "the PDF has no pages")
        if count > limits.max_pages:
            raise Unreadable("too_large", f"{count} pages, over the limit of {limits.max_pages}")
        declared_title = document.get_metadata_dict(skip_empty=True).get("Title")
        pages: list[PageText] = []
        forms = LetterForms()
        chars = 0
        for index in range(count):
            if time.monotonic() - started > limits.seconds:
                raise Unreadable("timeout", f"still reading page {index + 1} of {count} after {limits.seconds:g} s")
            page = _read_page(document, index, forms)
            chars += page.chars
            if chars > limits.max_text_chars:
                raise Unreadable("too_large", f"text runs over {limits.max_text_chars} characters")
            pages.append(page)
    finally:
        document.close()
    if not any(page.items for page in pages):
        raise Unreadable("scanned", f"no text layer on any of its {count} pages: needs OCR")
    read = build_document(pages)
    if read.title is None and declared_title:
        read = replace(read, title=declared_title)
    return read


def _open(path: Path) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as error:
        if error.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise Unreadable("encrypted", "the PDF needs a password to open") from None
        raise Unreadable("corrupt", "not a PDF PDFium can parse") from None


def _read_page(document: pdfium.PdfDocument, index: int, forms: LetterForms) -> PageText:
    try:
        return read_page(document, index, forms)
    except pdfium.PdfiumError:
        raise Unreadable("corrupt", f"page {index + 1} cannot be parsed") from None
