"""Read a web page (HTML) into a Document: the article only, with its headings, lists and tables.

lxml's HTML parser (libxml2, BSD) is driven as a stream: it calls back on every start tag,
end tag and run of text, and nothing builds a tree. So the cost of a page is bounded as it
is read: its text by `max_text_chars`, tables nested past `max_nesting` and elements nested
past `_MAX_ELEMENT_DEPTH` end the read (`too_complex`), and a page of one 50 MB line is just
text arriving in pieces. Malformed markup is repaired by libxml2's recovering parser.

What is dropped, by rules rather than a trained or scoring extractor (trafilatura, jusText
and readability-lxml were measured: docs/measurements/office-html-extraction.md):
- scripts, styles, forms and other non-text elements; `nav`, `aside`, the site's `header`
  and `footer` (not an article's own); ARIA navigation, banner, contentinfo, complementary,
  search and dialog roles; anything `hidden`, `aria-hidden` or styled `display: none`;
- boxes whose id or class names a menu, cookie or consent banner, breadcrumbs, "related"
  or sharing box, newsletter, sidebar, popup, ad or comments, unless the article is inside
  the box (a wrapper named `content-with-sidebar` is not a sidebar);
- when the page marks its article (`<article>`, `<main>`, `role="main"`, or a content id
  or class), everything outside it; on a page that marks none, the paragraphs and items
  made of link text alone (menus, link lists).
A table with a heading in a cell lays out a page (older sites): it is read as blocks.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from lxml import etree

from chatbot.documents._sections import SectionBuilder, one_line
from chatbot.documents.model import Block, Document, ListItem, Paragraph, ReadLimits, Table, Unreadable

_FEED_BYTES = 1024 * 1024
_SNIFF_BYTES = 4096
_MAX_ELEMENT_DEPTH = 250
"""Real pages nest a few dozen elements deep. libxml2 stops reading past 256, so a page that
deep is refused here rather than read in part."""

_NOT_TEXT = frozenset(
    {"script", "style", "noscript", "template", "head", "svg", "math", "canvas", "iframe", "object", "embed"}
    | {"form", "button", "select", "textarea", "input", "label", "option", "dialog", "nav", "aside", "menu"}
)
_PAGE_FRAME = frozenset({"header", "footer"})
"""The site's header and footer: dropped outside the article, kept inside it (an article's own byline header)."""
_DROP_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog", "menu"}
)
_BOX_WORDS = frozenset(
    {"nav", "navbar", "navigation", "menu", "cookie", "cookies", "consent", "gdpr", "breadcrumb", "breadcrumbs"}
    | {"related", "share", "sharing", "social", "newsletter", "subscribe", "advert", "ad", "ads", "promo"}
    | {"sidebar", "popup", "modal", "skip", "comment", "comments", "widget", "widgets"}
)
_FRAME_WORDS = frozenset({"header", "footer", "masthead", "banner", "colophon"})
_STATE_PREFIXES = ("has-", "no-", "with-", "is-", "show-", "hide-")
_TOKEN_PARTS = re.compile(r"[-_]+")
_NEVER_BOXED = frozenset({"html", "body", "main", "article"})
"""Elements whose classes describe the page, not a box in it (`<body class="has-sidebar">`)."""
_ARTICLE_NAMES = frozenset(
    {"content", "main", "main-content", "article", "article-body", "post", "post-content", "entry", "entry-content"}
)
"""Whole id or class tokens that mark the article on a page built of divs."""
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_CELLS = frozenset({"td", "th"})
_BREAKS = frozenset(
    {"p", "div", "section", "article", "main", "blockquote", "pre", "dl", "dt", "dd", "figure", "figcaption"}
    | {"address", "center", "details", "summary", "hr", "ul", "ol", "li", "body", "html", "table", "tr", "caption"}
    | set(_HEADINGS)
    | _CELLS
)
"""Elements that end the text gathered before them and start a block of their own."""
_NO_ATTRIBUTES: dict[str, str] = {}
_INVISIBLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_LINKED_SHARE = 0.9
"""A block with at least this share of its characters inside links is a link, not prose."""
_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.-]+)|<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_:.-]+)""",
    re.IGNORECASE,
)
"""`<meta charset>`, `<meta http-equiv content="...; charset=">`, or an XHTML page's XML declaration."""


def read_html(path: Path, limits: ReadLimits) -> Document:
    """Read an HTML file, or raise Unreadable saying why it is not taken."""
    if path.stat().st_size > limits.max_bytes:
        raise Unreadable("too_large", f"file is over {limits.max_bytes} bytes")
    page = _Page(limits)
    parser = etree.HTMLParser(target=page, encoding="utf-8", recover=True, no_network=True, remove_comments=True)
    try:
        with path.open("rb") as raw:
            encoding, mark = page_encoding(raw.read(_SNIFF_BYTES))
            raw.seek(mark)
            # decoded piece by piece, so a 50 MB page is never held as bytes and text at once
            decoder = codecs.getincrementaldecoder(encoding)("replace")
            while (chunk := raw.read(_FEED_BYTES)) and page.refused is None:
                parser.feed(decoder.decode(chunk).encode("utf-8", "replace"))
            parser.feed(decoder.decode(b"", final=True).encode("utf-8", "replace"))
        parser.close()
    except etree.XMLSyntaxError as error:
        if page.refused is None:
            raise Unreadable("corrupt", "markup libxml2 cannot recover from") from error
    if page.refused is not None:
        raise page.refused
    return page.document()


def page_encoding(head: bytes) -> tuple[str, int]:
    """Return a page's encoding and its byte-order mark's length: by the mark, else as declared, else UTF-8."""
    for mark, encoding in (
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ):
        if head.startswith(mark):
            return encoding, len(mark)
    declared = _META_CHARSET.search(head)
    if declared:
        try:
            return codecs.lookup((declared.group(1) or declared.group(2)).decode("ascii")).name, 0
        except LookupError:
            pass  # a charset Python does not know: read as UTF-8, the web's default
    return "utf-8", 0


class _Where(NamedTuple):
    """Where text is: depth of the outermost article marker, and of the innermost named box (-1: none)."""

    article_at: int = -1
    boxed_at: int = -1

    @property
    def in_article(self) -> bool:
        return self.article_at >= 0

    @property
    def boxed(self) -> bool:
        """Inside a box named like boilerplate (menu, sidebar, share...) that the article is not inside of."""
        return self.boxed_at > self.article_at


_NOWHERE = _Where()


class _Frame(NamedTuple):
    tag: str
    dropped: bool
    where: _Where


@dataclass
class _TableBuild:
    rows: list[list[str]] = field(default_factory=list)
    cell: list[str] | None = None
    cell_link_chars: int = 0
    linked: list[bool] = field(default_factory=list)
    """Per cell gathered, in reading order: all its text is link text."""
    layout: bool = False
    """A table that lays out a page (a heading in a cell): its cells hold blocks, not values."""


@dataclass(frozen=True, slots=True)
class _Found:
    """A heading or block met while streaming, and whether it was inside the page's article."""

    where: _Where
    block: Block | None = None
    linked: bool = False
    """All its text is link text: a menu entry or a link list's item."""
    heading: tuple[int, str] | None = None


class _Page:
    """The parser target: follows the open elements and turns text into headings and blocks.

    Text is gathered until an element that starts or ends a block; the block it makes is
    read off the open elements then: inside a table cell it is the cell's text, else the
    nearest open `li` or `h1`-`h6` makes it an item or a heading, else it is a paragraph.
    """

    def __init__(self, limits: ReadLimits) -> None:
        self._limits = limits
        self._stack: list[_Frame] = []
        self._dropped = 0
        self._text: list[str] = []
        self._tables: list[_TableBuild] = []
        self._found: list[_Found] = []
        self._chars = 0
        self._elements = 0
        self._blocks_seen = 0
        self._links = 0  # <a> elements open around the text being gathered
        self._link_chars = 0
        self._title: list[str] | None = None
        self._page_title: str | None = None
        self.language: str | None = None
        self.refused: Unreadable | None = None

    # lxml's target interface

    def start(self, tag: str, attributes: Mapping[str, str]) -> None:
        if self.refused is not None:
            return
        stack = self._stack
        self._elements += 1
        if self._elements > self._limits.max_elements:
            self.refused = Unreadable("too_complex", f"over {self._limits.max_elements} elements")
            return
        if len(stack) >= _MAX_ELEMENT_DEPTH:
            self.refused = Unreadable("too_complex", f"elements nested over {_MAX_ELEMENT_DEPTH} deep")
            return
        where = stack[-1].where if stack else _NOWHERE
        if tag == "title" and self._page_title is None:
            self._title = []  # gathered even inside the dropped <head>
        if self._dropped:
            stack.append(_Frame(tag, True, where))
            self._dropped += 1
            return
        # lxml's attribute view answers each lookup slowly; a page has millions of them to ask
        attrs = dict(attributes) if attributes else _NO_ATTRIBUTES
        if tag == "html":
            self._language(attrs)
        inside = where
        if not where.in_article and _marks_article(tag, attrs):
            inside = where._replace(article_at=len(stack))
        dropped = _is_dropped(tag, attrs, inside.in_article)
        if dropped:
            self._dropped += 1
        else:
            self._open(tag, where)  # before the push: text gathered so far is the parent's
            if attrs and tag not in _NEVER_BOXED and _names_a_box(attrs, inside.in_article):
                inside = inside._replace(boxed_at=len(stack))
        stack.append(_Frame(tag, dropped, inside))

    def end(self, tag: str) -> None:
        if self.refused is not None or not self._stack:
            return
        if tag == "title" and self._title is not None:
            self._page_title = one_line("".join(self._title)) or None
            self._title = None
        frame = self._stack.pop()
        if frame.dropped:
            self._dropped -= 1
            return
        self._close(frame.tag, frame.where)

    def data(self, text: str) -> None:
        if self._title is not None:
            self._title.append(text)
        if self.refused is not None or self._dropped:
            return
        self._chars += len(text)
        if self._chars > self._limits.max_text_chars:
            self.refused = Unreadable("too_large", f"text runs over {self._limits.max_text_chars} characters")
            return
        self._text.append(text)
        if self._links:
            self._link_chars += len(text.strip())

    def comment(self, text: str) -> None:
        return None

    def close(self) -> None:
        if self.refused is None:
            self._flush(self._where())

    # building

    def _open(self, tag: str, where: _Where) -> None:
        if tag == "a":
            self._links += 1
        elif tag == "br":
            self.data(" ")
        elif tag in _BREAKS:
            if tag in _HEADINGS and self._tables and self._tables[-1].cell is not None:
                self._unfold_layout_table(where)
            self._flush(where)
            if tag == "table":
                if len(self._tables) >= self._limits.max_nesting:
                    self.refused = Unreadable("too_complex", f"tables nested over {self._limits.max_nesting} deep")
                    return
                self._tables.append(_TableBuild())
            elif tag == "tr" and self._tables and not self._tables[-1].layout:
                self._count_block()
                self._tables[-1].rows.append([])
            elif tag in _CELLS and self._tables and not self._tables[-1].layout:
                table = self._tables[-1]
                if not table.rows:
                    table.rows.append([])
                table.cell = []

    def _close(self, tag: str, where: _Where) -> None:
        if tag == "a":
            self._links = max(self._links - 1, 0)
        elif tag in _BREAKS:
            self._flush(where, closing=tag)
            if tag in _CELLS and self._tables and self._tables[-1].cell is not None:
                table = self._tables[-1]
                text = one_line("".join(table.cell or ()))
                table.rows[-1].append(text)
                table.linked.append(bool(text) and table.cell_link_chars >= _LINKED_SHARE * len(text))
                table.cell, table.cell_link_chars = None, 0
            elif tag == "table" and self._tables:
                self._table_done(self._tables.pop(), where)

    def _unfold_layout_table(self, where: _Where) -> None:
        """Turn the innermost table into a page layout: what its cells held so far becomes paragraphs.

        Old sites lay a whole page out in a table; read as a table, the article would become
        one row. A heading inside a cell is what tells such a table from one of values.
        """
        table = self._tables[-1]
        gathered = zip((cell for row in table.rows for cell in row), table.linked, strict=False)
        for text, linked in gathered:
            if text:
                self._keep(_Found(where, block=Paragraph(text), linked=linked))
        current = one_line("".join(table.cell or ()))
        if current:
            self._keep(
                _Found(where, block=Paragraph(current), linked=table.cell_link_chars >= _LINKED_SHARE * len(current))
            )
        table.rows, table.cell, table.linked, table.layout = [], None, [], True

    def _table_done(self, built: _TableBuild, where: _Where) -> None:
        if built.layout:
            return
        rows = [tuple(row) for row in built.rows if any(row)]
        if self._tables and self._tables[-1].cell is not None:
            # a table inside a cell: its rows become that cell's text
            self._tables[-1].cell.append(" " + " ".join(" ".join(row) for row in rows) + " ")
        elif rows:
            self._keep(_Found(where, block=Table(rows[0], tuple(rows[1:]))))

    def _flush(self, where: _Where, closing: str | None = None) -> None:
        """End the text gathered so far as the block the open elements make of it.

        `closing` is the element just closed, no longer on the stack: its text is its own.
        """
        text = one_line("".join(self._text)) if self._text else ""
        self._text = []
        linked, self._link_chars = self._link_chars >= _LINKED_SHARE * len(text), 0
        if not text:
            return
        if self._tables and self._tables[-1].cell is not None:
            self._tables[-1].cell.append(" " + text + " ")
            self._tables[-1].cell_link_chars += len(text) if linked else 0
            return
        kind = closing if closing in _HEADINGS or closing == "li" else self._enclosing_block()
        if kind in _HEADINGS:
            self._keep(_Found(where, heading=(_HEADINGS[kind], text)))
        elif kind == "li":
            self._keep(_Found(where, block=ListItem(text), linked=linked))
        else:
            self._keep(_Found(where, block=Paragraph(text), linked=linked))

    def _enclosing_block(self) -> str | None:
        """Return the nearest open `li` or heading (a table of values has taken its cells' text before)."""
        for frame in reversed(self._stack):
            if frame.tag in _HEADINGS or frame.tag == "li":
                return frame.tag
        return None

    def _keep(self, found: _Found) -> None:
        self._count_block()
        self._found.append(found)

    def _count_block(self) -> None:
        self._blocks_seen += 1
        if self._blocks_seen > self._limits.max_blocks:
            self.refused = Unreadable("too_large", f"over {self._limits.max_blocks} paragraphs, items and table rows")

    def _where(self) -> _Where:
        return self._stack[-1].where if self._stack else _NOWHERE

    def _language(self, attributes: dict[str, str]) -> None:
        declared = (attributes.get("lang") or attributes.get("xml:lang") or "").strip()
        if declared:
            self.language = declared.split("-")[0].split("_")[0].lower() or None

    def document(self) -> Document:
        """Return the article as a Document.

        On a page that marks no article, what is left after the dropped elements is taken,
        less the paragraphs and items that are all link text: unmarked menus and link lists.
        Boxes named like boilerplate are left out too, unless that would leave no block at
        all: then the names misled (a wrapper's `has-sidebar`), and their text is the page's.
        """
        has_article = any(found.where.in_article for found in self._found)

        def wanted(found: _Found, boxes_too: bool) -> bool:
            if has_article and not found.where.in_article:
                return False
            if not has_article and found.linked:
                return False
            return boxes_too or not found.where.boxed

        kept = [found for found in self._found if wanted(found, boxes_too=False)]
        if not any(found.block is not None for found in kept):
            kept = [found for found in self._found if wanted(found, boxes_too=True)]
        sections = SectionBuilder(self._limits)
        first_h1: str | None = None
        for found in kept:
            if found.heading is not None:
                level, text = found.heading
                if level == 1 and first_h1 is None:
                    first_h1 = text
                sections.heading(level, text)
            elif found.block is not None:
                sections.add(found.block)
        return Document(title=self._page_title or first_h1, language=self.language, sections=sections.finish())


def _marks_article(tag: str, attributes: dict[str, str]) -> bool:
    if tag in ("article", "main"):
        return True
    if not attributes:
        return False
    if attributes.get("role", "").lower() in ("main", "article"):
        return True
    if tag not in ("div", "section"):
        return False
    names = f"{attributes.get('id', '')} {attributes.get('class', '')}".lower().split()
    return not _ARTICLE_NAMES.isdisjoint(names)


def _is_dropped(tag: str, attributes: dict[str, str], in_article: bool) -> bool:
    """Tell an element whose text is never the article's: by its tag, ARIA role, or being hidden."""
    if not attributes:
        return tag in _NOT_TEXT or (tag in _PAGE_FRAME and not in_article)
    if tag in _NOT_TEXT or "hidden" in attributes or attributes.get("aria-hidden", "").lower() == "true":
        return True
    if _INVISIBLE.search(attributes.get("style", "")):
        return True
    if attributes.get("role", "").lower() in _DROP_ROLES and not (in_article and tag in _PAGE_FRAME):
        return True
    return tag in _PAGE_FRAME and not in_article


def _names_a_box(attributes: dict[str, str], in_article: bool) -> bool:
    """Tell an element whose id or class names a menu, sidebar, sharing box... (or, outside the article, a page frame).

    A word counts at either end of a token (`main-menu`, `cookie-banner`, `sidebar-left`);
    a state class (`has-sidebar`, `no-comments`) names no box.
    """
    for token in f"{attributes.get('id', '')} {attributes.get('class', '')}".lower().split():
        if token.startswith(_STATE_PREFIXES):
            continue
        parts = _TOKEN_PARTS.split(token)
        for part in (parts[0], parts[-1]):
            if part in _BOX_WORDS or (not in_article and part in _FRAME_WORDS):
                return True
    return False
