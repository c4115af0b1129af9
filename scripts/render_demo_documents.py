"""Render the demo's PDF and Word documents from their Markdown sources in knowledge/sources/.

Run from the repository root with the dev extras installed (`.venv/bin/python -m scripts.render_demo_documents`):
the policy wording becomes a shaped Persian PDF of several A6 pages (so an answer cites a page),
the accident cover a right-to-left DOCX, both written into knowledge/demo/fa/. The renderers are
the test corpus's own (tests/fixtures/corpus), so the demo files are made as the tests' are.
"""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.corpus.render_docx import render_docx
from tests.fixtures.corpus.render_pdf import shaped_pdf
from tests.fixtures.corpus.source import parse_markdown

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "knowledge" / "sources"
DEMO = ROOT / "knowledge" / "demo" / "fa"


def main() -> None:
    """Write the demo's PDF and DOCX next to its Markdown documents."""
    wording = parse_markdown((SOURCES / "masouliat-karfarma.md").read_text("utf-8"))
    shaped_pdf(wording, DEMO / "masouliat-karfarma.pdf", header="آکمه - شرایط عمومی")
    accident = parse_markdown((SOURCES / "havades-enferadi.md").read_text("utf-8"))
    render_docx(accident, DEMO / "havades-enferadi.docx")


if __name__ == "__main__":
    main()
