"""The wire readers split a provider's event stream at CR, LF and CRLF only (the SSE specification's line ends)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from chatbot.models._wire import _data_lines, _sse_lines


class _Body:
    """An httpx response's text, in the chunks a network would cut it into."""

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks

    async def aiter_text(self) -> AsyncIterator[str]:
        for chunk in self.chunks:
            yield chunk


STREAM = 'event: a\r\ndata: {"t":"x\u2028y\u2029z\u0085w\x0c"}\r\n\r\ndata: 2\rdata: 3\r\rdata: 4\n\n'


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
async def test_lines_split_at_cr_lf_and_crlf_only_wherever_the_chunks_are_cut(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    lines = [line async for line in _sse_lines(_Body(chunks))]
    assert lines == [
        "event: a",
        'data: {"t":"x\u2028y\u2029z\u0085w\x0c"}',
        "",
        "data: 2",
        "data: 3",
        "",
        "data: 4",
        "",
    ]
    events = [event async for event in _data_lines(_Body(chunks))]
    assert events == [("a", '{"t":"x\u2028y\u2029z\u0085w\x0c"}'), (None, "2\n3"), (None, "4")]


async def test_a_last_line_without_its_end_is_still_read() -> None:
    assert [line async for line in _sse_lines(_Body(["data: 1\r\ndata: 2\r"]))] == ["data: 1", "data: 2"]
    assert [line async for line in _sse_lines(_Body(["data: 1\r\ndata: 2"]))] == ["data: 1", "data: 2"]
