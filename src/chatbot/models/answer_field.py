"""Read the `answer` string out of a JSON object while it streams, in one pass.

A structured answer arrives as pieces of JSON text (tool-call arguments, or content on the
json_schema path). Re-parsing the accumulated text at every piece, as LangChain's partial
parser does, costs the square of the answer; this scanner looks at each character once
and hands out the newly decoded characters of the top-level `answer` value.
"""

from __future__ import annotations

import re

_PLAIN_RUN = re.compile(r'[^"\\]+')
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_REPLACEMENT = "\ufffd"


class AnswerField:
    """Incremental decoder of the top-level `"answer"` string of a streamed JSON object.

    `feed(piece)` returns the characters of the answer that became known with `piece`.
    An escape split across pieces waits for its end; a trailing high surrogate (escaped,
    or raw: a provider's piece boundary can split a pair) waits for its pair, since a
    character once shown cannot be taken back; an unpaired one becomes U+FFFD, so what
    comes out always encodes as UTF-8.
    """

    def __init__(self, key: str = "answer") -> None:
        self._key = key
        self._parts: list[str] = []  # every piece fed, joined only when `text` is read
        self._pending = ""  # the start of an escape whose end is in a later piece
        self._depth = 0
        self._in_string = False
        self._in_answer = False
        self._key_chars: list[str] | None = None
        self._current_key: str | None = None
        self._after_colon = False
        self._held = ""  # a trailing high surrogate waiting for its pair

    @property
    def text(self) -> str:
        """Return all the JSON text fed so far."""
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def feed(self, piece: str) -> str:
        """Take the next piece of JSON text; return the answer characters it completed.

        Only the piece (and at most five characters of an escape left from the one before)
        is read: the work is the piece's, however long the answer has grown.
        """
        self._parts.append(piece)
        out: list[str] = []
        text = self._pending + piece if self._pending else piece
        pos, end = 0, len(text)
        while pos < end:
            char = text[pos]
            if self._in_string:
                if char == "\\":
                    used = self._escape(text, pos, out)
                    if used == 0:
                        break  # the escape's end is in a later piece
                    pos += used
                elif char == '"':
                    self._close_string(out)
                    pos += 1
                else:
                    run = _PLAIN_RUN.match(text, pos)
                    assert run is not None
                    self._emit(run.group(), out)
                    pos = run.end()
                continue
            self._structure(char)
            pos += 1
        self._pending = text[pos:]
        result = self._held + "".join(out)
        self._held = ""
        if result and "\ud800" <= result[-1] <= "\udbff":
            result, self._held = result[:-1], result[-1]
        return valid_unicode(result)

    def _structure(self, char: str) -> None:
        if char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1
        elif char == '"':
            self._in_string = True
            if self._depth == 1 and not self._after_colon:
                self._key_chars = []
            else:
                self._in_answer = self._depth == 1 and self._current_key == self._key
            self._after_colon = False
        elif self._depth == 1 and char == ":":
            self._after_colon = True
        elif self._depth == 1 and char == ",":
            self._after_colon = False
            self._current_key = None
        elif not char.isspace():
            self._after_colon = False

    def _close_string(self, out: list[str]) -> None:
        if self._key_chars is not None:
            self._current_key = "".join(self._key_chars)
            self._key_chars = None
        self._in_string = self._in_answer = False

    def _escape(self, text: str, pos: int, out: list[str]) -> int:
        """Decode the escape at `pos`; return how many characters it used (0: incomplete)."""
        if pos + 1 >= len(text):
            return 0
        kind = text[pos + 1]
        if kind != "u":
            self._emit(_SIMPLE_ESCAPES.get(kind, kind), out)
            return 2
        if pos + 6 > len(text):
            return 0
        try:
            code = int(text[pos + 2 : pos + 6], 16)
        except ValueError:
            self._emit(_REPLACEMENT, out)
            return 6
        self._emit(chr(code), out)
        return 6

    def _emit(self, chars: str, out: list[str]) -> None:
        if self._key_chars is not None:
            self._key_chars.append(chars)
        elif self._in_answer:
            out.append(chars)


_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE_SURROGATE = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")


def valid_unicode(text: str) -> str:
    """Return `text` with surrogate pairs joined into one character and lone surrogates as U+FFFD.

    JSON's `\\ud800` escapes decode to lone surrogates, which no UTF-8 encoder accepts (the SSE
    frame, the JSON response and the stored record would all fail).
    """
    if not _SURROGATE.search(text):
        return text
    paired = _LONE_SURROGATE.sub(_REPLACEMENT, text)
    return paired.encode("utf-16", "surrogatepass").decode("utf-16")
