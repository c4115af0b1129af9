"""Measure PDF text extraction on the test corpus: words recovered and pages per second.

Renders every corpus source (tests/fixtures/corpus) both ways Persian PDFs are made (shaped
by HarfBuzz, and legacy presentation forms in visual order), then, per library and kind:
  - words recovered against the source (`word_recall`, ZWNJ counted), mean and worst over the
    documents, raw and after the text-only repairs (`_persian.repair_text`: forms folded,
    marks and mirrors put back, ZWNJ by the affix rule);
  - for `chatbot.documents.pdf.read_pdf` (PDFium with the box-based repairs and the layout),
    the same, and the words with a ZWNJ the source does not have (false insertions);
  - pages per second (one process, the whole corpus).
Then the reader on one long shaped PDF of full A4 pages (`--pages`, default 1,000; about 50
distinct pages of the corpus, repeated): pages per second and peak RSS of a child process that
only reads it.

    .venv/bin/python -m bench.pdf_extraction [--pages 1000] [--long-only] [--font F.ttf --bold-font F-Bold.ttf]

The corpus is drawn in IBM Plex Sans Arabic unless `--font` names another (the reader was
tuned on none: DejaVu Sans, where installed, is a second check).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.corpus.render_pdf import A4, FONTS, legacy_pdf, shaped_pdf
from tests.fixtures.corpus.source import document_text, read_source, source_paths, word_recall, words

from chatbot.documents._persian import repair_text
from chatbot.documents.model import Document, ReadLimits, Section
from chatbot.documents.pdf import read_pdf

KINDS = {"shaped": shaped_pdf, "legacy": legacy_pdf}


def pdfium_text(path: Path) -> str:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(path)
    try:
        return "\n".join(document[i].get_textpage().get_text_range() for i in range(len(document)))
    finally:
        document.close()


def pdfminer_text(path: Path) -> str:
    from pdfminer.high_level import extract_text

    return str(extract_text(str(path)))


def pypdf_text(path: Path) -> str:
    import pypdf

    return "\n".join(page.extract_text() for page in pypdf.PdfReader(path).pages)


def reader_text(path: Path) -> str:
    return document_text(read_pdf(path, ReadLimits()))


LIBRARIES: dict[str, Callable[[Path], str]] = {
    "pypdfium2 5.15": pdfium_text,
    "pdfminer.six 20260107": pdfminer_text,
    "pypdf 7.1": pypdf_text,
}


def page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(path)
    try:
        return len(document)
    finally:
        document.close()


def false_zwnj(source: str, read: str) -> tuple[int, int]:
    want = Counter(w for w in words(source) if "\u200c" in w)
    got = Counter(w for w in words(read) if "\u200c" in w)
    return sum((got - want).values()), sum(want.values())


def corpus_figures(folder: Path, fonts: tuple[Path, Path]) -> None:
    rendered: dict[str, list[tuple[str, Path]]] = {}
    for source_path in source_paths():
        source = read_source(source_path)
        language = "Persian" if source_path.parent.name == "fa" or "fa" in source_path.stem.split("-") else "English"
        for kind, render in KINDS.items():
            path = render(source, folder / f"{source_path.parent.name}-{source_path.stem}-{kind}.pdf", fonts=fonts)
            rendered.setdefault(f"{kind}, {language}", []).append((document_text(source), path))
    print(
        "| library | PDF kind | pages/s | words, raw: mean (worst) | after text repairs: mean (worst) "
        "| words given a ZWNJ the source lacks (final text) |"
    )
    print("|---|---|---|---|---|---|")
    for name, extract in [*LIBRARIES.items(), ("read_pdf (PDFium + box repairs + layout)", reader_text)]:
        for kind, cases in rendered.items():
            started = time.perf_counter()
            texts = [extract(path) for _, path in cases]
            elapsed = time.perf_counter() - started
            pages = sum(page_count(path) for _, path in cases)
            wanted = [source for source, _ in cases]
            raw = [word_recall(w, t) for w, t in zip(wanted, texts, strict=True)]
            final = texts if extract is reader_text else [repair_text(t) for t in texts]
            repaired = [word_recall(w, t) for w, t in zip(wanted, final, strict=True)]
            false = sum(false_zwnj(w, t)[0] for w, t in zip(wanted, final, strict=True))
            zwnj_words = sum(false_zwnj(w, w)[1] for w in wanted)
            after = (
                "(the reader's own)"
                if extract is reader_text
                else f"{statistics.mean(repaired):.3f} ({min(repaired):.3f})"
            )
            print(
                f"| {name} | {kind} | {pages / elapsed:.0f} | {statistics.mean(raw):.3f} ({min(raw):.3f}) "
                f"| {after} | {false} (of {zwnj_words} with one) |"
            )


def long_document(pages: int) -> Document:
    """The corpus' sections, Persian and English, over and over: about `pages` A4 pages."""
    sources = [read_source(p) for p in source_paths()]
    sections: list[Section] = []
    while len(sections) < pages * 12:  # about 12 sections an A4 page at this layout
        for source in sources:
            sections.extend(source.sections)
    return Document("Long", None, tuple(sections))


def long_figures(folder: Path, pages: int) -> None:
    path = repeated(shaped_pdf(long_document(50), folder / "part.pdf", page=A4), pages, folder / "long.pdf")
    count = page_count(path)
    child = [sys.executable, "-c", f"from bench.pdf_extraction import read_only; read_only({str(path)!r})"]
    started = time.perf_counter()
    subprocess.run(child, check=True)
    elapsed = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    print(f"\nread_pdf on one shaped A4 PDF of {count} pages: {count / elapsed:.0f} pages/s of wall time,")
    print(f"{count / cpu:.0f} pages per CPU second (the figure a busy shared machine moves least),")
    print(f"peak RSS {usage.ru_maxrss / 1024:.0f} MB (child process, interpreter start included)")


def repeated(part: Path, pages: int, path: Path) -> Path:
    """Write a PDF of at least `pages` pages, `part`'s pages over and over (shaping 1,000 pages takes minutes)."""
    import pypdfium2 as pdfium

    source = pdfium.PdfDocument(part)
    whole = pdfium.PdfDocument.new()
    while len(whole) < pages:
        whole.import_pages(source)
    whole.save(path)
    whole.close()
    source.close()
    return path


def read_only(path: str) -> None:
    read_pdf(Path(path), ReadLimits())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--long-only", action="store_true", help="only the long PDF's speed and memory")
    parser.add_argument("--font", type=Path, default=FONTS[0], help="regular font file to render with")
    parser.add_argument("--bold-font", type=Path, default=FONTS[1], help="bold font file to render with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if not args.long_only:
            corpus_figures(Path(folder), (args.font, args.bold_font))
        long_figures(Path(folder), args.pages)


if __name__ == "__main__":
    main()
