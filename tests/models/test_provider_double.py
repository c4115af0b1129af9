"""The provider wire double, driven by the real client packages over HTTP (no database, no network).

These pin down both the double's wire and what each client makes of it, failures included:
tests elsewhere rely on both.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any, cast

import anthropic
import httpx
import openai
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.exceptions import ModelRefusalError
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.fixtures.provider_double import Behaviour, ProviderDouble, english_answer, persian_answer

# The fixture, imported as conftest files will (`x as x`: a re-export, so no unused-import or redefinition warning).
from tests.fixtures.provider_double import provider_double as provider_double
from tests.fixtures.provider_double import provider_double_module as provider_double_module

ANSWER = english_answer(90)


class StructuredAnswer(BaseModel):
    status: str
    answer: str
    citations: list[str] = Field(default_factory=list)


class Summary(BaseModel):
    summary: str


def openai_model(double: ProviderDouble, **kwargs: Any) -> ChatOpenAI:
    kwargs = {"model": "gpt-4o-mini", "base_url": double.openai_base_url, "api_key": "k", "max_retries": 0, **kwargs}
    return ChatOpenAI(stream_usage=True, **kwargs)


def anthropic_model(double: ProviderDouble, **kwargs: Any) -> ChatAnthropic:
    kwargs = {
        "model": "claude-haiku-4-5",
        "base_url": double.anthropic_base_url,
        "api_key": "k",
        "max_retries": 0,
        **kwargs,
    }
    return ChatAnthropic(**kwargs)


def chat_model(double: ProviderDouble, provider: str, **kwargs: Any) -> Any:
    return openai_model(double, **kwargs) if provider == "openai" else anthropic_model(double, **kwargs)


async def collect(runnable: Any, prompt: str = "Does my policy cover a burst pipe?") -> tuple[list[Any], Any]:
    """Return the streamed chunks and their sum."""
    chunks = [chunk async for chunk in runnable.astream(prompt)]
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return chunks, total


def pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- normal answers --------------------------------------------------------------------------


async def test_openai_text_streams_in_pieces_with_usage_and_finish_reason(provider_double: ProviderDouble) -> None:
    provider_double.script("gpt-4o-mini", Behaviour(answer=ANSWER, usage=(120, 30, 100)))
    chunks, total = await collect(openai_model(provider_double))
    assert [chunk.content for chunk in chunks if chunk.content] == pieces(ANSWER)
    assert total.response_metadata["finish_reason"] == "stop"
    assert total.usage_metadata["input_tokens"] == 120
    assert total.usage_metadata["output_tokens"] == 30
    assert total.usage_metadata["input_token_details"]["cache_read"] == 100
    [record] = provider_double.requests
    assert (record.provider, record.path, record.model, record.kind) == (
        "openai",
        "/v1/chat/completions",
        "gpt-4o-mini",
        "text",
    )
    assert record.stream and record.include_usage and not record.tools and not record.response_format
    assert record.headers["authorization"] == "Bearer k"
    assert record.completed and record.pieces_sent == len(pieces(ANSWER))


# langchain-openai dumps the openai SDK's parsed stream events with a `parsed` field typed None: a client warning.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
async def test_openai_json_schema_answers_with_the_json_object_as_content(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(answer=ANSWER, citations=["c1"]))
    _, total = await collect(openai_model(provider_double).bind(response_format=StructuredAnswer))
    assert StructuredAnswer.model_validate_json(total.content) == StructuredAnswer(
        status="answered", answer=ANSWER, citations=["c1"]
    )
    assert total.response_metadata["finish_reason"] == "stop"
    assert total.usage_metadata["output_tokens"] > 0
    record = provider_double.requests[0]
    assert record.response_format and record.kind == "json" and record.schema_name == "StructuredAnswer"

    parsed = (
        await openai_model(provider_double).with_structured_output(StructuredAnswer, method="json_schema").ainvoke("q")
    )
    assert parsed == StructuredAnswer(status="answered", answer=provider_double.default.answer)


async def test_openai_forced_tool_streams_arguments_in_pieces(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(answer=ANSWER))
    bound = openai_model(provider_double).bind_tools([StructuredAnswer], tool_choice="StructuredAnswer")
    chunks, total = await collect(bound)
    calls = [call for chunk in chunks for call in chunk.tool_call_chunks]
    assert calls[0]["id"] and calls[0]["name"] == "StructuredAnswer" and calls[0]["args"] == ""
    assert all(call["id"] is None and call["name"] is None for call in calls[1:])
    assert len(calls) > 10  # the arguments came in pieces
    assert total.tool_calls[0]["args"] == {"status": "answered", "answer": ANSWER, "citations": []}
    assert total.response_metadata["finish_reason"] == "stop"  # as OpenAI ends a forced call
    record = provider_double.requests[0]
    assert record.body["tool_choice"] == {"type": "function", "function": {"name": "StructuredAnswer"}}
    assert record.tools and record.kind == "tool"

    structured = openai_model(provider_double).with_structured_output(StructuredAnswer, method="function_calling")
    assert cast(StructuredAnswer, await structured.ainvoke("q")).answer == provider_double.default.answer


async def test_anthropic_text_streams_in_pieces_with_usage_and_stop_reason(provider_double: ProviderDouble) -> None:
    answer = persian_answer(50)
    assert len(answer) == 50
    provider_double.script(Behaviour(answer=answer, usage=(120, 30, 100)))
    chunks, total = await collect(anthropic_model(provider_double))
    assert [chunk.content for chunk in chunks if chunk.content] == pieces(answer)
    assert total.response_metadata["stop_reason"] == "end_turn"
    assert total.usage_metadata["input_tokens"] == 120  # 20 uncached + 100 read from the cache
    assert total.usage_metadata["output_tokens"] == 30
    assert total.usage_metadata["input_token_details"]["cache_read"] == 100
    [record] = provider_double.requests
    assert (record.provider, record.path, record.model, record.kind) == (
        "anthropic",
        "/v1/messages",
        "claude-haiku-4-5",
        "text",
    )
    # anthropic 2.x sends the API key as a bearer token, not x-api-key (the double takes either).
    assert record.headers["authorization"] == "Bearer k" and "anthropic-version" in record.headers


async def test_anthropic_forced_tool_and_structured_output(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(answer=ANSWER, citations=["c2"]))
    bound = anthropic_model(provider_double).bind_tools([StructuredAnswer], tool_choice="StructuredAnswer")
    chunks, total = await collect(bound)
    calls = [call for chunk in chunks for call in chunk.tool_call_chunks]
    assert calls[0]["name"] == "StructuredAnswer" and calls[0]["id"]
    assert all(call["name"] is None for call in calls[1:]) and len(calls) > 10
    assert total.tool_calls[0]["args"] == {"status": "answered", "answer": ANSWER, "citations": ["c2"]}
    assert total.response_metadata["stop_reason"] == "tool_use"
    assert provider_double.requests[0].body["tool_choice"] == {"type": "tool", "name": "StructuredAnswer"}

    for method in ("function_calling", "json_schema"):
        structured = anthropic_model(provider_double).with_structured_output(StructuredAnswer, method=method)
        assert cast(StructuredAnswer, await structured.ainvoke("q")).answer == provider_double.default.answer
    assert [r.kind for r in provider_double.requests[1:]] == ["tool", "json"]


async def test_other_schemas_use_the_objects_registry_and_raw_json(provider_double: ProviderDouble) -> None:
    provider_double.objects["Summary"] = {"summary": "a short summary"}
    summary = (
        await openai_model(provider_double).with_structured_output(Summary, method="function_calling").ainvoke("q")
    )
    assert summary == Summary(summary="a short summary")
    provider_double.script(Behaviour(obj={"summary": "scripted"}))
    scripted = await anthropic_model(provider_double).with_structured_output(Summary).ainvoke("q")
    assert cast(Summary, scripted).summary == "scripted"

    provider_double.script(
        Behaviour(raw_json='{"answer": "unterminated'), Behaviour(raw_json='{"answer": "unterminated')
    )
    bound = openai_model(provider_double).bind_tools([StructuredAnswer], tool_choice="StructuredAnswer")
    message = await bound.ainvoke("q")
    assert message.invalid_tool_calls[0]["args"] == '{"answer": "unterminated'
    # Streamed, the chunks' partial-JSON parser turns the same invalid text into a *valid* tool call.
    _, total = await collect(bound)
    assert total.tool_calls[0]["args"] == {"answer": "unterminated"} and not total.invalid_tool_calls


def test_scripts_by_model_then_any_model_then_the_default_in_a_sync_test(provider_double: ProviderDouble) -> None:
    provider_double.default = Behaviour(text="default")
    provider_double.script("gpt-4o", Behaviour(text="for gpt-4o"))
    provider_double.script(None, Behaviour(text="any model"))
    mini, four = openai_model(provider_double), openai_model(provider_double, model="gpt-4o")
    assert mini.invoke("q").content == "any model"
    assert four.invoke("q").content == "for gpt-4o"
    assert four.invoke("q").content == "default"
    assert "".join(str(chunk.content) for chunk in anthropic_model(provider_double).stream("q")) == "default"
    assert [r.stream for r in provider_double.requests] == [False, False, False, True]


# -- failures ----------------------------------------------------------------------------------


async def test_length_ends_halfway_with_the_providers_reason(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(answer=ANSWER, finish="length"), Behaviour(answer=ANSWER, finish="length"))
    _, total = await collect(openai_model(provider_double))
    assert total.content == "".join(pieces(ANSWER)[: len(pieces(ANSWER)) // 2])
    assert total.response_metadata["finish_reason"] == "length"
    assert total.usage_metadata is not None
    _, total = await collect(anthropic_model(provider_double))
    assert total.response_metadata["stop_reason"] == "max_tokens"

    # On the json_schema path the openai SDK itself refuses a cut answer.
    provider_double.script(Behaviour(finish="length"))
    with pytest.raises(openai.LengthFinishReasonError):
        await openai_model(provider_double).with_structured_output(StructuredAnswer, method="json_schema").ainvoke("q")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_cut_ends_the_stream_without_finish_or_usage(provider_double: ProviderDouble, provider: str) -> None:
    provider_double.script(Behaviour(answer=ANSWER, finish="cut"))
    _, total = await collect(chat_model(provider_double, provider))
    assert total.content == "".join(pieces(ANSWER)[: len(pieces(ANSWER)) // 2])
    assert "finish_reason" not in total.response_metadata and "stop_reason" not in total.response_metadata
    assert total.usage_metadata is None
    assert provider_double.requests[0].completed


async def test_cut_stream_on_the_wire_has_no_done_or_message_stop(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(finish="cut"), Behaviour(finish="cut"))
    async with httpx.AsyncClient(base_url=provider_double.url, headers={"x-api-key": "k"}) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": True}
        openai_wire = (await client.post("/v1/chat/completions", json=body)).text
        anthropic_wire = (await client.post("/v1/messages", json={**body, "max_tokens": 10})).text
    assert "[DONE]" not in openai_wire and 'finish_reason":"stop' not in openai_wire
    assert "event: content_block_delta" in anthropic_wire
    assert "message_delta" not in anthropic_wire and "message_stop" not in anthropic_wire


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_cut_connection_raises_a_connection_error(provider_double: ProviderDouble, provider: str) -> None:
    provider_double.script(Behaviour(finish="cut_connection"))
    error = openai.APIConnectionError if provider == "openai" else anthropic.APIConnectionError
    with pytest.raises(error):
        await collect(chat_model(provider_double, provider))
    record = provider_double.requests[0]
    assert not record.completed and record.pieces_sent == len(pieces(provider_double.default.answer)) // 2


async def test_openai_refusals(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(finish="refusal"), Behaviour(finish="refusal"), Behaviour(finish="refusal"))
    model = openai_model(provider_double)
    with pytest.raises(ModelRefusalError, match="can't help"):  # langchain_openai.OpenAIRefusalError
        await model.with_structured_output(StructuredAnswer, method="json_schema").ainvoke("q")
    # On the tools path the refusal is plain content and no tool call: the parser gives None.
    assert await model.with_structured_output(StructuredAnswer, method="function_calling").ainvoke("q") is None
    _, total = await collect(model.bind(response_format=StructuredAnswer))
    assert total.additional_kwargs.get("refusal") or total.content_blocks[0]["type"] == "refusal"


async def test_anthropic_refusal_stop_reason(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(finish="refusal"), Behaviour(finish="refusal", cut_at=0))
    _, total = await collect(anthropic_model(provider_double))
    assert total.response_metadata["stop_reason"] == "refusal"
    with pytest.raises(ModelRefusalError):
        await anthropic_model(provider_double).with_structured_output(StructuredAnswer).ainvoke("q")


async def test_anthropic_error_event_inside_a_200_stream(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(finish="error_event"))
    with pytest.raises(anthropic.APIStatusError) as caught:
        await collect(anthropic_model(provider_double))
    assert caught.value.status_code == 200 and caught.value.type == "overloaded_error"
    assert provider_double.requests[0].pieces_sent > 0


async def test_openai_error_chunk_inside_a_200_stream(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(finish="error_event"))
    with pytest.raises(openai.APIError) as caught:
        await collect(openai_model(provider_double))
    assert not isinstance(caught.value, openai.APIStatusError)
    assert caught.value.type == "server_error"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_429_carries_retry_after(provider_double: ProviderDouble, provider: str) -> None:
    provider_double.script(Behaviour(http_status=429, retry_after=1.5))
    error = openai.RateLimitError if provider == "openai" else anthropic.RateLimitError
    with pytest.raises(error) as caught:
        await chat_model(provider_double, provider).ainvoke("q")
    assert isinstance(caught.value, (openai.RateLimitError, anthropic.RateLimitError))  # as raises() checked
    headers = caught.value.response.headers
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("1.5", "1500")
    assert provider_double.requests[0].status == 429


async def test_sdk_retries_take_the_next_scripted_behaviour(provider_double: ProviderDouble) -> None:
    provider_double.script(Behaviour(http_status=529, retry_after=0.01), Behaviour(text="after the retry"))
    async with anthropic.AsyncAnthropic(
        base_url=provider_double.anthropic_base_url, api_key="k", max_retries=1
    ) as client:
        message = await client.messages.create(
            model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": "q"}]
        )
    assert message.content[0].text == "after the retry"  # type: ignore[union-attr]
    assert [r.headers["x-stainless-retry-count"] for r in provider_double.requests] == ["0", "1"]
    assert [r.status for r in provider_double.requests] == [529, 200]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_bad_key_unknown_model_and_doubled_v1(provider_double: ProviderDouble, provider: str) -> None:
    errors: Any = openai if provider == "openai" else anthropic
    with pytest.raises(errors.AuthenticationError) as caught:
        await chat_model(provider_double, provider, api_key="bad-key").ainvoke("q")
    body = caught.value.body
    assert (
        body["code"] == "invalid_api_key" if provider == "openai" else body["error"]["type"] == "authentication_error"
    )

    with pytest.raises(errors.NotFoundError) as caught:
        await chat_model(provider_double, provider, model="unknown-model").ainvoke("q")
    body = caught.value.body
    assert body["code"] == "model_not_found" if provider == "openai" else body["error"]["type"] == "not_found_error"

    # An OpenAI base URL with /v1 twice, an Anthropic one ending in /v1: both reach /v1/v1/...
    doubled = provider_double.url + "/v1/v1" if provider == "openai" else provider_double.openai_base_url
    with pytest.raises(errors.NotFoundError):
        await chat_model(provider_double, provider, base_url=doubled).ainvoke("q")
    assert provider_double.requests[-1].path.startswith("/v1/v1/")


async def test_models_endpoints(provider_double: ProviderDouble) -> None:
    async with openai.AsyncOpenAI(base_url=provider_double.openai_base_url, api_key="k", max_retries=0) as client:
        assert "gpt-4o-mini" in [model.id async for model in client.models.list()]
        assert (await client.models.retrieve("gpt-4o")).id == "gpt-4o"
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("unknown-model")
    async with anthropic.AsyncAnthropic(base_url=provider_double.anthropic_base_url, api_key="k") as claude:
        assert "claude-haiku-4-5" in [model.id async for model in claude.models.list()]


# -- timing and cancellation -------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_first_byte_and_piece_delays_are_honoured(provider_double: ProviderDouble, provider: str) -> None:
    provider_double.script(Behaviour(answer="x" * 20, first_byte_delay=0.3, piece_delay=0.05))
    started, arrivals = time.monotonic(), []
    async for chunk in chat_model(provider_double, provider).astream("q"):
        if chunk.content:
            arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 5
    assert arrivals[0] >= 0.3
    assert arrivals[-1] - arrivals[0] >= 4 * 0.05 * 0.9


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_client_that_goes_away_stops_the_pieces(provider_double: ProviderDouble, provider: str) -> None:
    provider_double.script(Behaviour(answer="x" * 400, piece_delay=0.02))
    seen: list[AIMessageChunk] = []

    # langchain-openai reads each chunk through asyncio.wait_for (its stream_chunk_timeout), which on
    # Python 3.11 loses a cancel that lands as a chunk arrives: the stream then runs to its end.
    # Switched off here; code that cancels streams needs the same (or Python 3.12+).
    model = chat_model(provider_double, provider, **({"stream_chunk_timeout": 0} if provider == "openai" else {}))

    async def read() -> None:
        async for chunk in model.astream("q"):
            seen.append(chunk)

    task = asyncio.create_task(read())
    assert await provider_double.async_wait_for(lambda double: sum(double.pieces_sent) >= 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Recorded as it returns from writing: whatever it had sent by then is all it sends.
    assert await provider_double.async_wait_for(lambda double: bool(double.disconnected))
    assert provider_double.pieces_sent[0] < 100
    assert provider_double.disconnected[0].index == provider_double.requests[0].index


def test_a_subprocess_reaches_the_double(provider_double: ProviderDouble) -> None:
    code = (
        "import httpx, sys; "
        "r = httpx.post(sys.argv[1] + '/chat/completions', headers={'authorization': 'Bearer k'}, "
        "json={'model': 'gpt-4o-mini', 'messages': [{'role': 'user', 'content': 'q'}]}); "
        "print(r.json()['choices'][0]['message']['content'])"
    )
    out = subprocess.run([sys.executable, "-c", code, provider_double.openai_base_url], capture_output=True, text=True)
    assert out.stdout.strip() == provider_double.default.answer, out.stderr


@pytest.mark.parametrize("turn", [1, 2])
async def test_a_module_double_serves_tests_on_different_event_loops(
    provider_double_module: ProviderDouble, turn: int
) -> None:
    # langchain caches its httpx client per base URL for the process: with keep-alive, the second
    # turn would reuse a connection of the first turn's closed loop.
    provider_double_module.reset()
    provider_double_module.script(Behaviour(text=f"turn {turn}"))
    assert (await openai_model(provider_double_module).ainvoke("q")).content == f"turn {turn}"
    assert (await anthropic_model(provider_double_module).ainvoke("q")).content == provider_double_module.default.answer
    assert [r.status for r in provider_double_module.requests] == [200, 200]
