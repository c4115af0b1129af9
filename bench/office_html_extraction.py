"""Measure the DOCX and HTML extractors on the test corpus: words recovered, boilerplate let through, speed.

Every corpus source (knowledge/demo and tests/fixtures/corpus/sources) is rendered as the
tests render it (tests/fixtures/corpus/render_docx.py, render_html.py in both layouts), then
read by each candidate:

  DOCX: chatbot.documents.docx (lxml, the body streamed), python-docx, docx2python, mammoth (raw text);
  HTML: chatbot.documents.html (lxml's streaming parser with rules), trafilatura (tables
        included), jusText (the document's stoplist), readability-lxml (its summary); on the
        two layouts the tests use, and on a third, "bare" page: the divs layout with every
        id and class removed, so that nothing on it names the boilerplate.

For each: words recovered (the tests' `word_recall`, ZWNJ counted) as mean and worst over
the documents, for HTML the boilerplate share of what was read (`boilerplate_share`), whether
it gives the structure a Document needs (heading path, list items, table rows with their
header), and milliseconds per document (median of `--repeat` reads). The files named
`holdout-*` were not looked at while the readers were tuned: their figures are printed apart.
Then the hostile pages, each read in a child process for its wall time and peak RSS: one
50 MB line of text, one ~50 MB line of tags.

    .venv/bin/pip install trafilatura justext readability-lxml docx2python mammoth
    .venv/bin/python -m bench.office_html_extraction [--repeat 3] [--no-hostile]

A candidate that is not installed is reported as such. Two shared cores: compare the figures
beside each other, not with another machine's.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.corpus.render_docx import render_docx
from tests.fixtures.corpus.render_html import LAYOUTS, boilerplate_share, boilerplate_text, render_html
from tests.fixtures.corpus.script import numbered_items_of
from tests.fixtures.corpus.source import document_text, read_source, source_paths, word_recall

from chatbot.documents.docx import read_docx
from chatbot.documents.html import read_html
from chatbot.documents.model import Block, Document, ListItem, ReadLimits, Table

LIMITS = ReadLimits()
_BARE = re.compile(r'\s(?:id|class)="[^"]*"')
"""Strips every id and class: the `divs` page then names none of its parts, a stress case no test holds."""
Extractor = Callable[[Path], str]


@dataclass
class Figures:
    recall: list[float] = field(default_factory=list)
    boilerplate: list[float] = field(default_factory=list)
    millis: list[float] = field(default_factory=list)

    def line(self, name: str, structure: str) -> str:
        if not self.recall:
            return f"| {name} | not installed | | | | {structure} |"
        boiler = f"{statistics.mean(self.boilerplate):.2%} / {max(self.boilerplate):.2%}" if self.boilerplate else "-"
        return (
            f"| {name} | {statistics.mean(self.recall):.4f} | {min(self.recall):.4f} | {boiler} "
            f"| {statistics.median(self.millis):.1f} | {structure} |"
        )


def _ours_docx(path: Path) -> str:
    return document_text(read_docx(path, LIMITS))


def _ours_html(path: Path) -> str:
    return document_text(read_html(path, LIMITS))


def _python_docx(path: Path) -> str:
    import docx
    from docx.table import Table as WordTable

    parts: list[str] = []
    for block in docx.Document(str(path)).iter_inner_content():
        if isinstance(block, WordTable):
            parts.extend(" ".join(cell.text for cell in row.cells) for row in block.rows)
        else:
            parts.append(block.text)
    return "\n".join(parts)


def _docx2python(path: Path) -> str:
    from docx2python import docx2python

    with docx2python(path) as extracted:
        return str(extracted.text)


def _mammoth(path: Path) -> str:
    import mammoth

    with path.open("rb") as raw:
        return str(mammoth.extract_raw_text(raw).value)


def _trafilatura(path: Path) -> str:
    import trafilatura

    return trafilatura.extract(path.read_text("utf-8"), include_tables=True, include_comments=False) or ""


def _justext(path: Path) -> str:
    import justext

    page = path.read_bytes()
    stoplist = justext.get_stoplist("Persian" if b'lang="fa' in page[:300] else "English")
    return "\n".join(p.text for p in justext.justext(page, stoplist) if not p.is_boilerplate)


def _readability(path: Path) -> str:
    import lxml.html
    from readability import Document as Readable

    summary = Readable(path.read_text("utf-8")).summary(html_partial=True)
    return str(lxml.html.fromstring(summary).text_content()) if summary.strip() else ""


DOCX: list[tuple[str, str, Extractor, str]] = [
    ("lxml stream (chatbot.documents.docx)", "lxml", _ours_docx, "headings, items, tables with header"),
    ("python-docx", "docx", _python_docx, "styles, paragraphs, tables: structure to walk"),
    ("docx2python", "docx2python", _docx2python, "text; tables as nested lists, no heading path"),
    ("mammoth (raw text)", "mammoth", _mammoth, "text only (its HTML output keeps h1-h6, li, table)"),
]
HTML: list[tuple[str, str, Extractor, str]] = [
    ("lxml stream + rules (chatbot.documents.html)", "lxml", _ours_html, "headings, items, tables with header"),
    ("trafilatura", "trafilatura", _trafilatura, "text; its XML output has head/list/table"),
    ("jusText", "justext", _justext, "paragraphs only, no tables or heading levels"),
    ("readability-lxml", "readability", _readability, "an HTML fragment to walk again"),
]


def _timed(extract: Extractor, path: Path, repeat: int) -> tuple[str, float]:
    times = []
    text = ""
    for _ in range(repeat):
        started = time.perf_counter()
        text = extract(path)
        times.append((time.perf_counter() - started) * 1000)
    return text, statistics.median(times)


def _render(folder: Path) -> list[tuple[Path, str, Path, list[Path]]]:
    """Render every source once: (source path, source text, DOCX path, HTML paths)."""
    rendered = []
    for index, source_path in enumerate(source_paths()):
        source = read_source(source_path)
        numbered = numbered_items_of(source_path.read_text("utf-8"))
        docx_path = render_docx(source, folder / f"{index}-{source_path.stem}.docx", numbered_items=numbered)
        pages = []
        for layout in LAYOUTS:
            page = folder / f"{index}-{source_path.stem}-{layout}.html"
            page.write_text(render_html(source, numbered_items=numbered, layout=layout), "utf-8")
            pages.append(page)
        bare = folder / f"{index}-{source_path.stem}-bare.html"
        bare.write_text(_BARE.sub("", render_html(source, numbered_items=numbered, layout="divs")), "utf-8")
        pages.append(bare)
        rendered.append((source_path, document_text(source), docx_path, pages))
    return rendered


def _measure(rendered: list[tuple[Path, str, Path, list[Path]]], repeat: int) -> None:
    for split in ("tuned on", "holdout"):
        chosen = [r for r in rendered if r[0].name.startswith("holdout-") == (split == "holdout")]
        print(f"\n## {split}: {len(chosen)} documents\n")
        print("| DOCX reader | words recovered, mean | worst | boilerplate | ms/doc | structure |")
        print("|---|---|---|---|---|---|")
        for name, module, extract, structure in DOCX:
            figures = Figures()
            if importlib.util.find_spec(module) is not None:
                for _, source_text, docx_path, _ in chosen:
                    text, millis = _timed(extract, docx_path, repeat)
                    figures.recall.append(word_recall(source_text, text))
                    figures.millis.append(millis)
            print(figures.line(name, structure))
        for label, layouts in (("semantic and divs layouts", slice(0, 2)), ("bare page", slice(2, 3))):
            print(
                f"\n| HTML reader, {label} | words recovered, mean | worst | boilerplate mean / worst "
                "| ms/page | structure |"
            )
            print("|---|---|---|---|---|---|")
            for name, module, extract, structure in HTML:
                figures = Figures()
                if importlib.util.find_spec(module) is not None:
                    for source_path, source_text, _, pages in chosen:
                        boilerplate = boilerplate_text(read_source(source_path))
                        for page in pages[layouts]:
                            text, millis = _timed(extract, page, repeat)
                            figures.recall.append(word_recall(source_text, text))
                            figures.boilerplate.append(boilerplate_share(text, source_text, boilerplate))
                            figures.millis.append(millis)
                print(figures.line(name, structure))
        _structure(chosen)


def _structure(chosen: list[tuple[Path, str, Path, list[Path]]]) -> None:
    """Print how much of the sources' structure the chosen readers keep: heading paths, items, tables."""
    kept = {"docx": [0, 0], "html": [0, 0]}
    for source_path, _, docx_path, pages in chosen:
        source = read_source(source_path)
        for kind, doc in [("docx", read_docx(docx_path, LIMITS)), *(("html", read_html(p, LIMITS)) for p in pages[:2])]:
            kept[kind][1] += 1
            identical = (
                [s.headings for s in doc.sections] == [s.headings for s in source.sections]
                and _blocks(doc, ListItem) == _blocks(source, ListItem)
                and _blocks(doc, Table) == _blocks(source, Table)
            )
            kept[kind][0] += int(identical)
    for kind, (same, total) in kept.items():
        print(f"\n{kind}: heading paths, list items and tables identical to the source's in {same} of {total} files")


def _blocks(doc: Document, kind: type) -> list[Block]:
    return [b for s in doc.sections for b in s.blocks if isinstance(b, kind)]


HOSTILE_CHILD = """
import sys, time
from pathlib import Path
from chatbot.documents.docx import read_docx
from chatbot.documents.html import read_html
from chatbot.documents.model import ReadLimits, Unreadable
path = Path(sys.argv[1])
started = time.perf_counter()
try:
    if sys.argv[2:] == ["python-docx"]:
        import docx
        outcome = f"python-docx: {len(docx.Document(str(path)).paragraphs)} paragraphs"
    else:
        doc = (read_docx if path.suffix == ".docx" else read_html)(path, ReadLimits())
        outcome = f"read: {sum(len(s.blocks) for s in doc.sections)} blocks"
except Unreadable as refused:
    outcome = f"Unreadable {refused}"
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec
status = Path("/proc/self/status").read_text()
peak = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) // 1024
print(f"{outcome} | {time.perf_counter() - started:.2f} s | {peak} MB")
"""


def _large_docx(path: Path) -> None:
    import docx

    out = docx.Document()
    for section in range(2000):
        out.add_heading(f"بخش {section}", level=2)
        for _ in range(20):
            out.add_paragraph("بیمه‌نامه‌ها هزینه‌های درمان را پوشش می‌دهد " * 5)
        out.add_table(rows=3, cols=3)
    out.save(str(path))


def _hostile(folder: Path) -> None:
    print("\n## large and hostile files (default ReadLimits, one child process each)\n")
    print("| file | outcome | wall | peak RSS |")
    print("|---|---|---|---|")
    text_line = folder / "one-line-text.html"
    paragraph = "<p>" + "بیمه‌نامه‌ها هزینه‌های کم‌ترین را پوشش می‌دهد " * 40 + "</p>"
    with text_line.open("w", encoding="utf-8") as out:
        out.write("<html lang='fa'><body><article>" + paragraph * (50 * 1024 * 1024 // len(paragraph.encode())))
    tag_line = folder / "one-line-tags.html"
    tag_line.write_text("<html><body>" + "<p>word <b>bold</b></p>" * 2_200_000 + "</body></html>", "utf-8")
    nested = folder / "nested-tables.html"
    nested.write_text("<html><body>" + "<table><tr><td>" * 500 + "deep" + "</td></tr></table>" * 500, "utf-8")
    large = folder / "large.docx"
    _large_docx(large)
    for label, path, how in (
        ("DOCX: 2,000 headings, 40,000 Persian paragraphs, 2,000 tables", large, "ours"),
        ("the same DOCX, opened by python-docx alone", large, "python-docx"),
        ("one 50 MB line of Persian paragraphs", text_line, "ours"),
        ("one 50 MB line of tags", tag_line, "ours"),
        ("tables nested 500 deep", nested, "ours"),
    ):
        child = subprocess.run(
            [sys.executable, "-c", HOSTILE_CHILD, str(path), how],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        size = f"{path.stat().st_size / (1024 * 1024):.1f} MB"
        print(f"| {label} ({size}) | {child.stdout.strip() or child.stderr[-200:]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="reads per document; the median is printed")
    parser.add_argument("--no-hostile", action="store_true", help="skip the 50 MB pages")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="office-html-bench-") as folder:
        rendered = _render(Path(folder))
        _measure(rendered, args.repeat)
        if not args.no_hostile:
            _hostile(Path(folder))
    print(f"\nthis process's peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")


if __name__ == "__main__":
    main()
