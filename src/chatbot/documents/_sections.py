"""Blocks gathered under their heading path, the part of every reader that builds `Document.sections`."""

from __future__ import annotations

import re

from chatbot.documents.model import Block, ReadLimits, Section, Table, Unreadable

_WHITE_SPACE = re.compile(r"\s{2,}|[^\S ]")
"""Runs of white space, and any one that is not a plain space: in ordinary text, few matches."""


_SPLIT_BELOW = 100_000


def one_line(text: str) -> str:
    """Collapse white space as a browser shows it.

    A short text is split and joined (fastest); a long one goes through a regex instead, so
    a 50 MB paragraph stays one string rather than millions of words at once.
    """
    if len(text) < _SPLIT_BELOW:
        return " ".join(text.split())
    return _WHITE_SPACE.sub(" ", text).strip()


class SectionBuilder:
    """Collects blocks in reading order and cuts a new Section at every heading.

    It also counts the text it is given, so a reader refuses a document past
    `limits.max_text_chars` as soon as it gets there, not after holding all of it.
    """

    def __init__(self, limits: ReadLimits) -> None:
        self._limits = limits
        self._path: list[tuple[int, str]] = []
        self._blocks: list[Block] = []
        self._sections: list[Section] = []
        self._chars = 0
        self._block_count = 0

    def heading(self, level: int, text: str) -> None:
        """Start the section under `text`, a heading of `level` (1 outermost): deeper or equal ones end."""
        self._count(len(text))
        self._flush()
        self._path = [(lvl, words) for lvl, words in self._path if lvl < level]
        self._path.append((level, text))

    def add(self, block: Block) -> None:
        """Add a paragraph, list item or table to the current section; an empty one is dropped."""
        if isinstance(block, Table):
            if not block.header and not block.rows:
                return
            self._count(
                sum(len(cell) for row in (block.header, *block.rows) for cell in row), blocks=1 + len(block.rows)
            )
        else:
            if not block.text:
                return
            self._count(len(block.text), blocks=1)
        self._blocks.append(block)

    def finish(self) -> tuple[Section, ...]:
        """Return the sections; a heading with nothing under it stays only where no later section carries it."""
        self._flush()
        kept = []
        for index, section in enumerate(self._sections):
            following = self._sections[index + 1] if index + 1 < len(self._sections) else None
            carried = following is not None and following.headings[: len(section.headings)] == section.headings
            if section.blocks or not carried:
                kept.append(section)
        return tuple(kept)

    def _flush(self) -> None:
        headings = tuple(words for _, words in self._path)
        if self._blocks or headings:
            self._sections.append(Section(headings, tuple(self._blocks)))
        self._blocks = []

    def _count(self, chars: int, blocks: int = 0) -> None:
        self._chars += chars
        self._block_count += blocks
        if self._chars > self._limits.max_text_chars:
            raise Unreadable("too_large", f"text runs over {self._limits.max_text_chars} characters")
        if self._block_count > self._limits.max_blocks:
            raise Unreadable("too_large", f"over {self._limits.max_blocks} paragraphs, items and table rows")
