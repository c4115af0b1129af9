"""The child process the format readers run in, one file at a time (reader.py starts and feeds it).

It bounds itself before reading anything: an address-space limit (a zip bomb or a 50 MB
line ends in `MemoryError` or a crash of this process, not of the machine), no core files,
and, per file, a CPU limit a little past the wall-clock one, so a spinning reader dies even
if the parent that would have killed it is gone. A request is a pickle on stdin; a reply a
pickle on the original stdout, which is kept for replies alone (a reader that prints writes
to stderr). End of input ends the process.
"""

from __future__ import annotations

import importlib
import os
import pickle
import resource
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from chatbot.documents.model import Document, ReadLimits, Unreadable

_LENGTH = struct.Struct("<Q")
# Seconds of CPU a file may use past its wall-clock bound before the kernel ends the process.
_CPU_MARGIN = 5

ReaderFunction = Callable[[Path, ReadLimits], Document]


def main() -> None:
    """Serve requests until stdin closes, under the memory limit given as the first argument."""
    memory_bytes = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    while True:
        request = _receive(requests)
        if request is None:
            return
        reply, stop = serve(*request)
        replies.write(_LENGTH.pack(len(reply)) + reply)
        replies.flush()
        if stop:
            return


def serve(path: str, reader: str, limits: ReadLimits) -> tuple[bytes, bool]:
    """Read one file; return the pickled reply and whether this process must end after it."""
    _bound_cpu(limits.seconds)
    try:
        document = _function(reader)(Path(path), limits)
        return pickle.dumps(("document", document), protocol=pickle.HIGHEST_PROTOCOL), False
    except Unreadable as exc:
        return _unreadable(exc.reason, exc.detail), False
    except MemoryError:
        # The heap may be left fragmented or half-freed: a fresh process takes the next file.
        return _unreadable("too_large", "needs more memory than the reader's limit", ends=True), True
    except RecursionError:
        return _unreadable("too_complex", "nested too deeply to read"), False
    except Exception as exc:  # a reader's failure on a malformed file: named by type, never by message
        return _unreadable("corrupt", f"the reader failed on it ({type(exc).__name__})"), False


def _unreadable(reason: str, detail: str, *, ends: bool = False) -> bytes:
    return pickle.dumps(("unreadable", reason, detail, ends), protocol=pickle.HIGHEST_PROTOCOL)


def _function(reference: str) -> ReaderFunction:
    module, _, name = reference.partition(":")
    found: ReaderFunction = getattr(importlib.import_module(module), name)
    return found


def _bound_cpu(seconds: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(usage.ru_utime + usage.ru_stime + seconds) + _CPU_MARGIN
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _receive(stream: IO[bytes]) -> tuple[Any, ...] | None:
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    request: tuple[Any, ...] = pickle.loads(stream.read(length))  # from the parent that started us
    return request


if __name__ == "__main__":
    main()
