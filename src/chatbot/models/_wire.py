"""A structured answer read straight off the provider's event stream: one `json.loads` per event.

Measured per piece of a streamed answer (client CPU, 4-character pieces): the OpenAI SDK's
typed stream builds a model object per chunk (about 0.1 ms), its beta `stream()` helper
re-parses a snapshot on top, and LangChain's `astream` adds a message chunk and its
accumulation; reading the SSE lines of the same response ourselves costs about 0.02 ms.
So the request is still made by the SDK client the LangChain model holds (its key, base
URL, timeout, retries, and its status errors, mapped to LangChain's exception classes as
before), on the plain streaming endpoint (`response_format` or a forced tool, never the
snapshot helper), and only the body is read here. A model of another class returns None
from `open_stream`: the caller reads it through LangChain.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.messages.ai import UsageMetadata
from pydantic import JsonValue

from chatbot.db.usage_totals import token_count

Method = Literal["json_schema", "tools"]


@dataclass
class Progress:
    """What the stream said besides the JSON pieces: finish, refusal, plain text, usage."""

    finish: str | None = None
    refused: bool = False
    text_only: bool = False
    usage: UsageMetadata | None = None


Reader = Callable[[Progress], AsyncGenerator[str, None]]
"""Yields the JSON pieces of the answer ("" for an event without one), filling `Progress`."""


def open_stream(model: BaseChatModel, messages: Sequence[BaseMessage], schema: dict[str, JsonValue],
                method: Method, extra: dict[str, int] | None = None) -> Reader | None:  # fmt: skip
    """Return a reader of `model`'s structured answer, or None for a model read through LangChain.

    `extra`: request arguments over the model's own (a lower `max_tokens`).
    """
    kind = type(model).__module__.partition(".")[0]
    if kind == "langchain_openai":
        return _openai(model, messages, schema, method, extra or {})
    if kind == "langchain_anthropic":
        return _anthropic(model, messages, schema, extra or {})
    return None


def _usage(input_tokens: int, output_tokens: int, cached: int) -> UsageMetadata:
    # Clamped where the provider's counts enter (db/usage_totals.py): no count can fail a run.
    input_tokens, output_tokens, cached = (token_count(n) for n in (input_tokens, output_tokens, cached))
    return UsageMetadata(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        input_token_details={"cache_read": cached},
    )


def _int(value: Any) -> int:
    return token_count(value)


# The SSE specification's line ends, and only these: httpx's `aiter_lines` follows
# `str.splitlines`, which also splits at U+2028, U+2029, U+0085 (and VT, FF, FS, GS, RS), so an
# answer quoting one had its JSON event cut in two and the run failed.
_LINE_END = re.compile("\r\n|\r|\n")


async def _sse_lines(response: Any) -> AsyncIterator[str]:
    """Yield the lines of an httpx response's event stream, split at CRLF, CR or LF only."""
    pending = ""
    async for text in response.aiter_text():
        pending += text
        start = 0
        for match in _LINE_END.finditer(pending):
            if match.group() == "\r" and match.end() == len(pending):
                break  # perhaps the first half of a CRLF cut between two chunks
            yield pending[start : match.start()]
            start = match.end()
        pending = pending[start:]
    if pending:
        yield pending.removesuffix("\r")


async def _data_lines(response: Any) -> AsyncIterator[tuple[str | None, str]]:
    """Yield (event name, data) of each server-sent event of an httpx response."""
    event: str | None = None
    data: list[str] = []
    async for line in _sse_lines(response):
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" ") if line.startswith("data: ") else line[5:])
        elif line.startswith("event:"):
            event = line[6:].strip()
    if data:
        yield event, "\n".join(data)


@dataclass(frozen=True, slots=True)
class _Errors:
    """One SDK's exceptions, and LangChain's mapping of them (what its chat model would raise)."""

    api_error: type[Exception]
    bad_request: type[Exception]
    connection_error: Callable[..., Exception]
    on_bad_request: Callable[[Any], None]
    on_api_error: Callable[[Any], None]

    @classmethod
    def of(cls, sdk: Any, on_bad_request: Callable[[Any], None], on_api_error: Callable[[Any], None]) -> _Errors:
        """Return the exceptions of an SDK module (openai, anthropic: the same three names) with LangChain's mapping."""
        return cls(sdk.APIError, sdk.BadRequestError, sdk.APIConnectionError, on_bad_request, on_api_error)


@contextmanager
def _request_errors(errors: _Errors) -> Iterator[None]:
    """Map the SDK's status errors as LangChain's model does (its exception classes, same causes)."""
    try:
        yield
    except errors.bad_request as exc:
        errors.on_bad_request(exc)
        raise
    except errors.api_error as exc:
        errors.on_api_error(exc)
        raise


@contextmanager
def _body_errors(errors: _Errors, request: Any) -> Iterator[None]:
    """Raise what is not already the SDK's error while reading the body as its connection error."""
    try:
        yield
    except errors.api_error:
        raise
    except Exception as exc:  # a dropped connection or a garbled body
        raise errors.connection_error(request=request) from exc


# -- OpenAI Chat Completions ----------------------------------------------------------------


class _OpenAIFunction(TypedDict, total=False):
    arguments: str | None


class _OpenAICall(TypedDict, total=False):
    index: int | None
    function: _OpenAIFunction | None


class _OpenAIDelta(TypedDict, total=False):
    content: str | None
    refusal: str | None
    tool_calls: list[_OpenAICall] | None


class _OpenAIChoice(TypedDict, total=False):
    delta: _OpenAIDelta | None
    finish_reason: str | None


class _OpenAIChunk(TypedDict, total=False):
    """A Chat Completions stream chunk, as far as it is read (every part may be absent or null)."""

    choices: list[_OpenAIChoice] | None
    usage: JsonValue
    error: JsonValue


def _openai(
    model: Any, messages: Sequence[BaseMessage], schema: dict[str, JsonValue], method: Method, extra: dict[str, int]
) -> Reader | None:
    import openai
    from langchain_openai.chat_models import base as lc_openai

    if method == "json_schema":
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": schema["title"], "description": schema.get("description", ""), "schema": schema},
        }
        kwargs: dict[str, Any] = {"response_format": response_format}
    else:
        kwargs = dict(model.bind_tools([schema], tool_choice=schema["title"]).kwargs)
    kwargs |= {"stream": True, "stream_options": {"include_usage": True}, **extra}
    if model._use_responses_api({**kwargs, **model.model_kwargs}):
        return None  # the Responses API streams other events: LangChain reads those
    payload = model._get_request_payload(list(messages), **kwargs)
    tools = method == "tools"

    errors = _Errors.of(openai, lc_openai._handle_openai_bad_request, lc_openai._handle_openai_api_error)

    async def read(progress: Progress) -> AsyncGenerator[str, None]:
        with _request_errors(errors):
            async with model.async_client.with_streaming_response.create(**payload) as response:
                http = response.http_response
                with _body_errors(errors, http.request):
                    async for _, data in _data_lines(http):
                        if data.startswith("[DONE]"):
                            break
                        chunk = json.loads(data)
                        if isinstance(chunk, dict) and chunk.get("error"):
                            error = chunk["error"]
                            message = error.get("message") if isinstance(error, dict) else None
                            raise openai.APIError(
                                message if isinstance(message, str) else "An error occurred during streaming",
                                request=http.request,
                                body=error,
                            )
                        yield _openai_chunk(chunk, tools, progress)

    return read


def _openai_chunk(chunk: _OpenAIChunk, tools: bool, progress: Progress) -> str:
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        progress.usage = _usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), cached)
    choices = chunk.get("choices")
    if not choices:
        return ""
    choice = choices[0]
    if finish := choice.get("finish_reason"):
        progress.finish = str(finish)
    delta = choice.get("delta") or {}
    if delta.get("refusal"):
        progress.refused = True
    content = delta.get("content")
    if tools:
        calls = delta.get("tool_calls")
        if calls:
            return "".join(
                str((call.get("function") or {}).get("arguments") or "")
                for call in calls
                if call.get("index") in (0, None)
            )
        if content:
            progress.text_only = True
        return ""
    return content if isinstance(content, str) else ""


# -- Anthropic Messages ----------------------------------------------------------------------


class _AnthropicDelta(TypedDict, total=False):
    type: str
    partial_json: str | None
    text: str | None
    stop_reason: str | None


class _AnthropicMessage(TypedDict, total=False):
    usage: dict[str, JsonValue] | None


class _AnthropicEvent(TypedDict, total=False):
    """A Messages stream event, as far as it is read (every part may be absent or null)."""

    type: str
    delta: _AnthropicDelta | None
    message: _AnthropicMessage | None
    usage: dict[str, JsonValue] | None


def _anthropic(
    model: Any, messages: Sequence[BaseMessage], schema: dict[str, JsonValue], extra: dict[str, int]
) -> Reader:
    import anthropic
    from langchain_anthropic import chat_models as lc_anthropic

    kwargs = dict(model.bind_tools([schema], tool_choice=schema["title"]).kwargs) | extra
    payload = model._get_request_payload(list(messages), stream=True, **kwargs)
    client = model._async_client
    endpoint = client.beta.messages if "betas" in payload else client.messages

    errors = _Errors.of(anthropic, lc_anthropic._handle_anthropic_bad_request, lc_anthropic._handle_anthropic_api_error)

    async def read(progress: Progress) -> AsyncGenerator[str, None]:
        with _request_errors(errors):
            async with endpoint.with_streaming_response.create(**payload) as response:
                http = response.http_response
                started: dict[str, JsonValue] = {}
                with _body_errors(errors, http.request):
                    async for event, data in _data_lines(http):
                        if event is None or event == "ping":
                            continue
                        if event == "error":
                            try:
                                body: Any = json.loads(data)
                            except ValueError:
                                body = data
                            raise client._make_status_error(str(body), body=body, response=http)
                        yield _anthropic_event(json.loads(data), started, progress)

    return read


def _anthropic_event(event: _AnthropicEvent, started: dict[str, JsonValue], progress: Progress) -> str:
    kind = event.get("type")
    if kind == "content_block_delta":
        delta = event.get("delta") or {}
        if delta.get("type") == "input_json_delta":
            return str(delta.get("partial_json") or "")
        if delta.get("type") == "text_delta" and delta.get("text"):
            progress.text_only = True
        return ""
    if kind == "message_start":
        started.update((event.get("message") or {}).get("usage") or {})
    elif kind == "message_delta":
        delta = event.get("delta") or {}
        if reason := delta.get("stop_reason"):
            progress.finish = str(reason)
        # The delta's counts are the call's totals; a field it lacks comes from message_start.
        usage = {**started, **(event.get("usage") or {})}
        cached = _int(usage.get("cache_read_input_tokens"))
        total_in = _int(usage.get("input_tokens")) + cached + _int(usage.get("cache_creation_input_tokens"))
        progress.usage = _usage(total_in, _int(usage.get("output_tokens")), cached)
    return ""
