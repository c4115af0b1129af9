"""Slow or half-sent requests are cut off by a real replica within the configured bound."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.fixtures.app import Replica, start_replica
from tests.fixtures.tokens import make_token

READ_TIMEOUT = 1.0
# How long the test waits for the replica to act: the bound plus room for a loaded machine.
# A replica without the deadline keeps the connection open and the read below times out.
WAIT = READ_TIMEOUT + 4.0


@pytest.fixture(scope="module")
def replica(migrated_database_url: str) -> Iterator[Replica]:
    """Return one replica whose request read deadline is READ_TIMEOUT seconds."""
    started = start_replica(migrated_database_url, CHATBOT_REQUEST_READ_TIMEOUT_SECONDS=str(READ_TIMEOUT))
    yield started
    started.kill(signal.SIGTERM)


def _connect(replica: Replica) -> socket.socket:
    address = urlsplit(replica.base_url)
    sock = socket.create_connection((address.hostname, address.port), timeout=WAIT)
    sock.settimeout(WAIT)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Return everything the server sent until it closed the connection (raises on a timeout)."""
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:  # closed while we were still sending: closed all the same
            return received
        if not chunk:
            return received
        received += chunk


def _head(body_length: int | None = None, *, chunked: bool = False) -> bytes:
    lines = [
        "POST /v1/threads/t-slow/runs HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {make_token()}",
        "Content-Type: application/json",
        "Accept: application/json",
    ]
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_connection_that_sends_nothing_is_closed(replica: Replica) -> None:
    with _connect(replica) as sock:
        assert _read_until_closed(sock) == b""


def test_a_half_sent_head_is_closed(replica: Replica) -> None:
    with _connect(replica) as sock:
        sock.sendall(_head()[:40])
        assert _read_until_closed(sock) == b""


def test_a_head_trickled_byte_by_byte_is_closed_by_the_deadline_not_kept_alive(replica: Replica) -> None:
    with _connect(replica) as sock:
        started = time.monotonic()
        closed = False
        for byte in _head()[:20]:  # not polling: a slow client's pace is the test
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.25)  # not polling: a byte per 250 ms is the slow client
            if time.monotonic() - started > WAIT:
                break
        assert closed or _read_until_closed(sock) == b""


def test_a_half_sent_body_gets_408_and_the_connection_closes(replica: Replica) -> None:
    body = b'{"message": {"content": "hello there"}}'
    with _connect(replica) as sock:
        sock.sendall(_head(len(body)) + body[:10])
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"application/problem+json" in answer


def test_an_unfinished_chunked_body_gets_408(replica: Replica) -> None:
    with _connect(replica) as sock:
        sock.sendall(_head(chunked=True) + b'5\r\n{"mes\r\n')
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408")


def test_a_half_sent_second_request_on_a_kept_alive_connection_is_closed(replica: Replica) -> None:
    with _connect(replica) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 12")
        assert _read_until_closed(sock) == b""


def test_a_complete_request_is_still_answered(replica: Replica) -> None:
    body = b'{"message": {"content": "hello there"}}'
    with _connect(replica) as sock:
        sock.sendall(_head(len(body)) + body)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")
