"""Pure logic of the client's stream handling: SSE decoding and where a rejoin continues."""

from __future__ import annotations

from chatbot.client.api import Retries
from chatbot.client.errors import retry_after_seconds
from chatbot.client.events import RunFollower, SSEDecoder

RUN = "6f1c0a52-0000-4000-8000-000000000001"


def lines(text: str) -> list[str]:
    return text.split("\n")


def test_decoder_reads_ids_skips_keepalive_comments_and_joins_data_lines() -> None:
    raw = (
        f'event: metadata\nid: {RUN}:0\ndata: {{"run_id": "{RUN}", "thread_id": "t"}}\n\n'
        ": keep-alive\n\n"
        f'event: token\nid: {RUN}:5\ndata: {{"content": "سلام "}}\n\n'
        'event: end\ndata: {"a":\ndata: 1}\n\n'
    )
    events = list(SSEDecoder().decode(lines(raw)))
    assert [(e.event, e.id) for e in events] == [("metadata", f"{RUN}:0"), ("token", f"{RUN}:5"), ("end", f"{RUN}:5")]
    assert events[1].data == {"content": "سلام "} and events[2].data == {"a": 1}


def test_follower_counts_code_points_and_hides_a_repeated_metadata() -> None:
    follower = RunFollower("t")
    decoded = SSEDecoder().decode(
        lines(f'event: metadata\ndata: {{"run_id": "{RUN}"}}\n\nevent: token\ndata: {{"content": "بیمه 👍 "}}\n\n')
    )
    assert [follower.admit(e) for e in decoded] == [True, True]
    assert follower.offset == 7 and follower.last_event_id == f"{RUN}:7"  # no ids sent: counted here
    again = next(iter(SSEDecoder().decode(lines(f'event: metadata\nid: {RUN}:7\ndata: {{"run_id": "{RUN}"}}\n\n'))))
    assert follower.admit(again) is False and not follower.finished


def test_joining_starts_from_the_offset_of_the_last_event_id() -> None:
    follower = RunFollower.joining("t", RUN, f"{RUN}:42")
    assert follower.offset == 42 and follower.last_event_id == f"{RUN}:42"
    assert RunFollower.joining("t", RUN, None).last_event_id == f"{RUN}:0"


def test_retries_honour_retry_after_and_never_retry_a_conflict() -> None:
    retries = Retries(attempts=2, backoff=0.5, max_wait=30)
    assert retries.delay(0, 409, 5) is None
    assert retries.delay(0, 429, 7) == 7 and retries.delay(0, 429, 31) is None
    assert retries.delay(2, 503, 1) is None  # attempts used up
    assert 0.25 <= (retries.delay(1, 503, None) or 0) <= 1.0  # doubled backoff, with jitter


def test_unicode_digits_in_ids_and_retry_after_are_not_numbers() -> None:
    # "²" and "٣" pass str.isdigit(): int("²") raises, int("٣") reads 3 (a header byte a proxy may send).
    for tail in ("²", "٣", "①"):
        assert RunFollower.joining("t", RUN, f"{RUN}:{tail}").offset == 0
    assert retry_after_seconds("²") is None and retry_after_seconds("7") == 7.0
