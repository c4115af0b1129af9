"""Hostile raw HTTP against a real replica: every request gets a 4xx or a closed connection, never a 5xx.

A fixed corpus (malformed JSON, invalid UTF-8, control characters, Content-Length lies,
huge headers, oversized and malformed chunked bodies, odd request lines), then random
mutations of a valid request (bytes flipped, inserted, cut; headers repeated). After
each case the replica must still answer a valid run.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures.app import Replica
from tests.fixtures.tokens import make_token
from tests.hardening.fuzzing import FUZZ_SETTINGS, Tally, fuzz_replica

__all__ = ["fuzz_replica"]

READ_WAIT = 10.0  # longer than the replica's 2 s read deadline: a request left waiting gets its 408
TALLY = Tally("hostile raw requests")
_STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ")


@pytest.fixture(scope="module", autouse=True)
def _print_tally() -> Iterator[None]:
    yield
    print(f"\n{TALLY.report()}")


# The corpus is built at import; each request gets a token minted when it is sent, and a
# rejoin gets the id of a run made on the replica before (a Last-Event-ID must name it).
TOKEN_SLOT = b"@token@"
RUN_SLOT = b"@run@"
REJOIN_THREAD = "t-hostile-check"  # the thread `_assert_still_serving` runs on
_RUNS: dict[str, str] = {}  # replica base URL -> the run id rejoins name


def _request(
    body: bytes,
    *,
    path: str = "/v1/threads/t-hostile/runs",
    method: str = "POST",
    extra: list[str] | None = None,
    content_length: str | None = "auto",
    content_type: str = "application/json",
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN_SLOT.decode()}"]
    lines += ["Accept: application/json", f"Content-Type: {content_type}", "Connection: close"]
    if content_length == "auto":
        lines.append(f"Content-Length: {len(body)}")
    elif content_length is not None:
        lines.append(f"Content-Length: {content_length}")
    lines += extra or []
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _send(replica: Replica, raw: bytes) -> int | None:
    """Send raw bytes; return the status answered, or None when the replica closed without one."""
    raw = raw.replace(TOKEN_SLOT, make_token().encode())  # minted now: the corpus outlives a token
    if RUN_SLOT in raw:
        raw = raw.replace(RUN_SLOT, _run_id(replica).encode())
    address = urlsplit(replica.base_url)
    with socket.create_connection((address.hostname, address.port), timeout=READ_WAIT) as sock:
        try:
            sock.sendall(raw)
        except OSError:
            pass  # the replica may answer and close before reading everything
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if len(answer) > 1 << 20:
                    break
        except ConnectionResetError:
            pass
    match = _STATUS.match(answer)
    status = int(match.group(1)) if match else None
    TALLY.add(status or 0)  # 0: closed without an answer
    return status


def _assert_still_serving(replica: Replica) -> str:
    response = httpx.post(
        f"{replica.base_url}/v1/threads/{REJOIN_THREAD}/runs",
        json={"message": {"content": "hello"}},
        headers={"Authorization": f"Bearer {make_token()}", "Accept": "application/json"},
        timeout=30,
    )
    assert response.status_code == 200
    return str(response.json()["run_id"])


def _run_id(replica: Replica) -> str:
    """Return the id of a finished run on REJOIN_THREAD, made on first use."""
    if replica.base_url not in _RUNS:
        _RUNS[replica.base_url] = _assert_still_serving(replica)
    return _RUNS[replica.base_url]


def _rejoin(last_event_id: str) -> bytes:
    """Return a rejoin of a run of the caller's thread, with `last_event_id` sent as Latin-1 bytes."""
    path = f"/v1/threads/{REJOIN_THREAD}/runs/{RUN_SLOT.decode()}/stream"
    return _request(b"", method="GET", path=path, content_length=None, extra=[f"Last-Event-ID: {last_event_id}"])


VALID = b'{"message": {"content": "hello"}}'
CORPUS: dict[str, tuple[bytes, set[int | None]]] = {
    # Bodies that are not UTF-8 JSON objects of the right shape: 422.
    "truncated json": (_request(b'{"message": {"content": "hi"'), {422}),
    "not json": (_request(b"{not json"), {422}),
    "invalid utf-8": (_request(b'{"message": {"content": "\xff\xfe"}}'), {422}),
    "utf-8 encoded surrogate": (_request(b'{"message": {"content": "\xed\xa0\x80"}}'), {422}),
    "escaped NUL": (_request(b'{"message": {"content": "a\\u0000b"}}'), {422}),
    "escaped lone surrogate": (_request(b'{"message": {"content": "a\\udbff"}}'), {422}),
    "raw control characters in a string": (_request(b'{"message": {"content": "a\x01\x02b"}}'), {422}),
    "deep nesting": (_request(b"[" * 30000 + b"]" * 30000), {422}),
    "huge number": (_request(b'{"message": {"content": "hi"}, "x": ' + b"9" * 20000 + b"}"), {422}),
    "body of the wrong type": (_request(VALID, content_type="text/plain"), {200, 422}),
    # Other encodings json.loads would guess, however labelled, and keys given twice: 422.
    "utf-16 with a byte-order mark": (_request(VALID.decode().encode("utf-16")), {422}),
    "utf-16-le labelled utf-8": (
        _request(VALID.decode().encode("utf-16-le"), content_type="application/json; charset=utf-8"),
        {422},
    ),
    "utf-32 labelled utf-8": (
        _request(VALID.decode().encode("utf-32"), content_type="application/json; charset=utf-8"),
        {422},
    ),
    "repeated key": (_request(b'{"message": {"content": "a"}, "message": {"content": "b"}}'), {422}),
    "repeated nested key": (_request(b'{"message": {"content": "a", "content": "b"}}'), {422}),
    # Size: declared or streamed, over 64 KiB is 413.
    "declared 1 GiB": (_request(b"", content_length=str(1 << 30)), {413}),
    "body over 64 KiB": (_request(b'{"message": {"content": "' + b"x" * 70000 + b'"}}'), {413}),
    "chunked over 64 KiB": (
        _request(b"", content_length=None, extra=["Transfer-Encoding: chunked"])
        + b"".join(b"4000\r\n" + b"x" * 0x4000 + b"\r\n" for _ in range(5))
        + b"0\r\n\r\n",
        {413},
    ),
    "chunk size of 4 GiB": (
        _request(b"", content_length=None, extra=["Transfer-Encoding: chunked"]) + b"FFFFFFFF\r\nxx",
        {413, 408},
    ),
    # Content-Length lies and framing the HTTP parser refuses.
    "content-length longer than the body": (_request(VALID, content_length="500"), {408}),
    "content-length shorter than the body": (_request(VALID, content_length="10"), {422, 400}),
    "content-length not a number": (_request(VALID, content_length="ten"), {400, 413}),
    "negative content-length": (_request(VALID, content_length="-5"), {400, 413}),
    "two different content-lengths": (_request(VALID, extra=["Content-Length: 3"]), {400}),
    # h11 lets Transfer-Encoding win (RFC 9112): the JSON is read as a chunk size that never ends.
    "content-length with chunked": (_request(VALID, extra=["Transfer-Encoding: chunked"]), {400, 408}),
    "chunk size not hex": (
        _request(b"", content_length=None, extra=["Transfer-Encoding: chunked"]) + b"zz\r\nabc\r\n0\r\n\r\n",
        {400},
    ),
    # Headers.
    "one 20 KiB header": (_request(VALID, extra=["X-Big: " + "a" * 20 * 1024]), {431}),
    "2,000 headers": (_request(VALID, extra=[f"X-H{i}: v" for i in range(2000)]), {431}),
    "control character in a header": (_request(VALID, extra=["X-Ctl: a\x01b"]), {200, 400}),  # h11 lets it by
    "bytes over 127 in the token": (
        _request(VALID).replace(b"Bearer ", b"Bearer \xff\xfe", 1),
        {401},
    ),
    "no authorization": (_request(VALID).replace(b"Authorization:", b"X-Nothing:", 1), {401}),
    # Last-Event-ID offsets that `str.isdigit()` takes for digits and `int()` refuses or misreads:
    # superscripts are single Latin-1 header bytes; the others arrive as their UTF-8 bytes.
    "Last-Event-ID offset in superscript two": (_rejoin("@run@:\xb2"), {422}),
    "Last-Event-ID offset in superscripts 1 2 3": (_rejoin("@run@:\xb9\xb2\xb3"), {422}),
    "Last-Event-ID offset of ASCII and superscript": (_rejoin("@run@:1\xb2"), {422}),
    "Last-Event-ID offset in Arabic-Indic (UTF-8)": (_rejoin("@run@:" + "\u0663".encode().decode("latin-1")), {422}),
    "Last-Event-ID offset in circled one (UTF-8)": (_rejoin("@run@:" + "\u2460".encode().decode("latin-1")), {422}),
    "Last-Event-ID offset of 19 digits": (_rejoin("@run@:" + "9" * 19), {422}),
    # Request lines.
    "path with %00": (_request(VALID, path="/v1/threads/a%00b/runs"), {422}),
    "path with broken percent-encoding": (_request(VALID, path="/v1/threads/%zz%/runs"), {422}),
    "path with encoded slash": (_request(VALID, path="/v1/threads/a%2Fb/runs"), {404, 422}),
    "very long path": (_request(VALID, path="/v1/threads/" + "a" * 20000 + "/runs"), {400, 414, 422}),
    "query with NUL and junk": (
        _request(b"", method="GET", path="/v1/threads/t-hostile/messages?limit=%00&before=%ff%fe", content_length=None),
        {404, 422},
    ),
    "unknown method": (_request(VALID, method="BREW"), {405}),
    "garbage request line": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64, {400, None}),
    "HTTP/0.9 style": (b"GET /healthz\r\n\r\n", {400, None}),
}


@pytest.mark.parametrize("name", list(CORPUS))
def test_hostile_request_gets_a_4xx_never_a_5xx(fuzz_replica: Replica, name: str) -> None:
    raw, expected = CORPUS[name]
    status = _send(fuzz_replica, raw)
    assert status is None or status < 500, f"{name}: {status}"
    assert status in expected, f"{name}: {status}"
    _assert_still_serving(fuzz_replica)


def _mutated(raw: bytes) -> st.SearchStrategy[bytes]:
    """Return random mutations of one valid request."""
    head, _, body = raw.partition(b"\r\n\r\n")
    headers = head.split(b"\r\n")

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        lines = list(headers)
        payload = bytearray(body)
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["flip", "insert", "cut", "repeat header", "drop header", "control"]))
            if kind == "flip" and payload:
                i = draw(st.integers(0, len(payload) - 1))
                payload[i] = draw(st.integers(0, 255))
            elif kind == "insert":
                i = draw(st.integers(0, len(payload)))
                payload[i:i] = draw(st.binary(min_size=1, max_size=16))
            elif kind == "cut" and payload:
                i = draw(st.integers(0, len(payload) - 1))
                del payload[i:]
            elif kind == "repeat header":
                lines.append(draw(st.sampled_from(lines[1:])))
            elif kind == "drop header":
                droppable = [i for i, line in enumerate(lines) if i and not line.startswith(b"Connection:")]
                lines.pop(draw(st.sampled_from(droppable)))
            elif kind == "control":
                i = draw(st.integers(1, len(lines) - 1))
                lines[i] += bytes([draw(st.integers(0, 31))])
        # Lengths stay true (the corpus has the lies) and "Connection: close" stays, so every
        # case ends with the replica's answer instead of a read deadline or a keep-alive wait.
        lines = [
            b"Content-Length: %d" % len(payload) if line.lower().startswith(b"content-length:") else line
            for line in lines
        ]
        return b"\r\n".join(lines) + b"\r\n\r\n" + bytes(payload)

    return mutate()


def test_mutated_requests_never_get_a_5xx(fuzz_replica: Replica) -> None:
    @FUZZ_SETTINGS
    @given(raw=_mutated(_request(VALID)))
    def check(raw: bytes) -> None:
        status = _send(fuzz_replica, raw)
        assert status is None or status < 500, status

    check()
    _assert_still_serving(fuzz_replica)
