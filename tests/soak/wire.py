"""A request the typed client never sends: a whole `POST …/runs` whose answer is never read."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httpx

from chatbot.client import api


async def post_and_hang_up(base: str, thread_id: str, content: str, token: str) -> None:
    """Write a whole `POST …/runs` on a new connection and close it without reading a byte.

    What a backend whose connection dropped before any answer knows: the service may or may
    not have started the run.
    """
    parts = urlsplit(base)
    body = httpx.Request("POST", base, json=api.run_body(content)).read()
    head = (
        f"POST {api.runs_path(thread_id)} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Accept: {api.SSE}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    _, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(head + body)
    await writer.drain()
    writer.close()
    await writer.wait_closed()
