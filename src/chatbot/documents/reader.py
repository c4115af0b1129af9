"""Reading documents: recognise a file, bound it, and run its format's reader in a child process.

`DocumentReader` is the feature's entry point (ingest holds one for a whole run):
`recognise(path)` checks the size before opening the file, tells the format by content
(sniff.py) and fingerprints it; `read(found)` runs the PDF, DOCX or HTML reader in a worker
process and returns its `Document`. The worker is reused across files (starting one costs a
Python start-up; a reused one, a pipe round trip) and replaced after any file that kills it,
so a crash, a hang past `ReadLimits.seconds` or a memory blow-up past `memory_bytes` fails
that file alone, with `Unreadable` (`crashed`, `timeout`, `too_large`). Markdown and text are
not read here: `recognise` returns their text, as ingest has always taken it.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, cast, get_args

from chatbot.documents.model import Document, ListItem, Paragraph, ReadLimits, Reason, Section, Table, Unreadable
from chatbot.documents.sniff import Kind, sniff

READERS: Mapping[Kind, str] = {
    "pdf": "chatbot.documents.pdf:read_pdf",
    "docx": "chatbot.documents.docx:read_docx",
    "html": "chatbot.documents.html:read_html",
}
"""The reader of each format, as `module:function`, imported in the worker when first needed."""

DEFAULT_MEMORY_BYTES = 1024**3
"""The worker's address-space limit: room for a large PDF's pages, not for a zip bomb."""

_LENGTH = struct.Struct("<Q")
_REASONS = frozenset(get_args(Reason))
_REPLY_CLASSES = {cls.__name__: cls for cls in (Document, Section, Paragraph, ListItem, Table)}
# What a Document of `max_text_chars` characters can take pickled (UTF-8, structure around it).
_REPLY_BYTES_PER_CHAR = 6
_REPLY_OVERHEAD = 64 * 1024**2


@dataclass(frozen=True, slots=True)
class Found:
    """A recognised file: how it is read, a fingerprint of its content, and its text if it is text."""

    path: Path
    kind: Kind
    fingerprint: str
    """sha256 of the content (of the decoded text for Markdown and text, as ingest always kept it)."""
    text: str | None = field(default=None, repr=False)
    """The text of a Markdown or text file, as written (newlines made `\\n`); None for other kinds."""

    @property
    def markdown(self) -> bool:
        """Tell whether the text is split by its Markdown headings."""
        return self.kind == "markdown"


class DocumentReader:
    """Recognises and reads files under one set of limits, with one reused worker process."""

    def __init__(
        self,
        limits: ReadLimits | None = None,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        readers: Mapping[Kind, str] = READERS,
    ) -> None:
        self.limits = limits or ReadLimits()
        self.memory_bytes = memory_bytes
        self.readers = readers
        self._worker: _Worker | None = None

    def __enter__(self) -> DocumentReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker process, if one was started."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def recognise(self, path: Path) -> Found:
        """Return how `path` is read, or raise `Unreadable` (too large, unsupported, corrupt, encrypted)."""
        size = path.stat().st_size
        if size > self.limits.max_bytes:
            raise Unreadable("too_large", f"{_megabytes(size)} over the {_megabytes(self.limits.max_bytes)} limit")
        kind = sniff(path)
        if kind in ("markdown", "text"):
            try:
                text = path.read_text(encoding="utf-8-sig")
            except UnicodeDecodeError:
                raise Unreadable("unsupported", "text that is not UTF-8") from None
            return Found(path, kind, hashlib.sha256(text.encode()).hexdigest(), text)
        with path.open("rb") as file:
            fingerprint = hashlib.file_digest(file, "sha256").hexdigest()
        return Found(path, kind, fingerprint)

    def read(self, found: Found) -> Document:
        """Return what the format's reader finds in a recognised PDF, DOCX or HTML file (`Unreadable` if not)."""
        reader = self.readers.get(found.kind)
        if reader is None:
            raise Unreadable("unsupported", f"{found.kind} is taken as text, not read as a document")
        if self._worker is None or not self._worker.alive():
            self._worker = _Worker(self.memory_bytes)
        worker = self._worker
        try:
            return worker.ask((str(found.path), reader, self.limits), self.limits, self.memory_bytes)
        finally:
            if not worker.alive():
                worker.stop()
                self._worker = None


def read_document(path: Path, limits: ReadLimits | None = None) -> Document:
    """Read one PDF, DOCX or HTML file in a worker of its own; `Unreadable` says why a file is not taken."""
    with DocumentReader(limits) as reader:
        return reader.read(reader.recognise(path))


class _Worker:
    """One child process running readers (documents/_worker.py), and the pipe to it."""

    def __init__(self, memory_bytes: int) -> None:
        # The child imports what this process can (the readers, a test's own reader).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chatbot.documents._worker", str(memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.ending = False
        """Set when the worker said it ends after its reply (after a memory error)."""

    def alive(self) -> bool:
        return not self.ending and self.process.poll() is None

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()  # end of input: the worker returns
            except OSError:
                pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def ask(self, request: tuple[Any, ...], limits: ReadLimits, memory_bytes: int) -> Document:
        assert self.process.stdin is not None and self.process.stdout is not None
        payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.process.stdin.write(_LENGTH.pack(len(payload)) + payload)
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self._died(memory_bytes) from None
        deadline = time.monotonic() + limits.seconds
        header = self._receive(_LENGTH.size, deadline, limits, memory_bytes)
        (length,) = _LENGTH.unpack(header)
        if length > limits.max_text_chars * _REPLY_BYTES_PER_CHAR + _REPLY_OVERHEAD:
            self._kill()
            raise Unreadable("too_large", "the reader's result is larger than the text limit allows")
        reply = _reply(self._receive(length, deadline, limits, memory_bytes))
        if isinstance(reply, Document):
            return reply
        self.ending = reply.ends_worker
        raise reply.error

    def _receive(self, size: int, deadline: float, limits: ReadLimits, memory_bytes: int) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        chunks = io.BytesIO()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while chunks.tell() < size:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    self._kill()
                    raise Unreadable("timeout", f"not read within {limits.seconds:g} s")
                data = os.read(fd, min(size - chunks.tell(), 1024 * 1024))
                if not data:
                    raise self._died(memory_bytes)
                chunks.write(data)
        return chunks.getvalue()

    def _kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def _died(self, memory_bytes: int) -> Unreadable:
        code = self.process.wait()
        if code < 0:
            how = signal.Signals(-code).name
            if -code == signal.SIGXCPU:
                return Unreadable("timeout", "the reader used up its CPU time")
        else:
            how = f"exit status {code}"
        return Unreadable("crashed", f"the reader process died ({how}; memory limit {_megabytes(memory_bytes)})")


class _ReplyUnpickler(pickle.Unpickler):
    """Builds only the Document's own classes: a worker that parsed a hostile file is not trusted further."""

    def find_class(self, module: str, name: str) -> Any:
        if module == Document.__module__ and name in _REPLY_CLASSES:
            return _REPLY_CLASSES[name]
        raise pickle.UnpicklingError(f"a reader's reply may not hold {module}.{name}")


@dataclass(frozen=True, slots=True)
class _Refusal:
    error: Unreadable
    ends_worker: bool


_MALFORMED = Unreadable("crashed", "the reader process sent a malformed reply")


def _reply(data: bytes) -> Document | _Refusal:
    try:
        reply = _ReplyUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError):
        raise _MALFORMED from None
    match reply:
        case ("document", Document() as document):
            return document
        case ("unreadable", str(reason), str(detail), bool(ends)) if reason in _REASONS:
            return _Refusal(Unreadable(cast(Reason, reason), detail), ends)
    raise _MALFORMED


def _megabytes(size: int) -> str:
    return f"{size / 1024**2:.1f} MB"
