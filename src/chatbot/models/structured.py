"""One streamed structured call to a chat model, read piece by piece, with its time limits.

LangChain's `with_structured_output` hides what a run must know: a stream stopped at its
length limit, cut without a finish, or refused reads as a normal end through its parser,
and it re-parses the accumulated arguments at every piece. Here the model is bound to the
schema the way `with_structured_output` would bind it (OpenAI json_schema for the models
that take it, a forced tool call otherwise), each chunk is read once (its JSON piece, its
finish reason, its refusal, its usage), and the answer field is decoded as it streams
(models/answer_field.py). OpenAI and Anthropic models are read straight off their event
stream (models/_wire.py); any other chat model through its `astream`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langchain_core.messages.ai import UsageMetadata, add_usage
from pydantic import JsonValue

from chatbot.models._wire import Progress, open_stream
from chatbot.models.answer_field import AnswerField
from chatbot.models.chain import ChainEntry

Method = Literal["json_schema", "tools"]
Phase = Literal["first_token", "idle", "total"]
Stop = Literal["normal", "incomplete", "refused"]

# How providers say why a stream ended (OpenAI finish_reason, Anthropic stop_reason,
# Ollama done_reason). A reason not listed is taken as incomplete: a record must never
# call an answer finished on a guess.
_NORMAL = frozenset({"stop", "tool_calls", "function_call", "end_turn", "tool_use", "stop_sequence"})
_REFUSED = frozenset({"refusal", "content_filter"})
# OpenAI models that take `response_format: json_schema` (the rest get a forced tool call),
# as langchain-openai's with_structured_output chooses.
_TOOLS_ONLY_OPENAI = ("gpt-3", "gpt-4-", "gpt-4-turbo")


class StreamTimeout(Exception):
    """A time limit of the call passed: before the first answer token, between pieces, or overall."""

    def __init__(self, phase: Phase) -> None:
        super().__init__(phase)
        self.phase = phase


@dataclass(frozen=True, slots=True)
class Limits:
    """The call's time limits, in seconds (the deadline on the loop's clock)."""

    first_token: float
    idle: float
    deadline: float


@dataclass
class Streamed:
    """What a structured stream gave so far: also readable when the call failed part-way."""

    field: AnswerField = dataclass_field(default_factory=AnswerField)
    shown: list[str] = dataclass_field(default_factory=list)
    """The answer pieces handed out, in order (kept as pieces: joining at every piece costs the square)."""
    finish: str | None = None
    """The provider's finish or stop reason, as it sent it; None if it sent none."""
    refused: bool = False
    text_only: bool = False
    """The model wrote plain text instead of the forced tool call."""
    usage: UsageMetadata | None = None

    @property
    def answer(self) -> str:
        """Return the answer characters handed out (what the user was shown)."""
        if len(self.shown) > 1:
            self.shown[:] = ["".join(self.shown)]
        return self.shown[0] if self.shown else ""

    def hand_out(self, piece: str, on_delta: Callable[[str], None]) -> None:
        """Feed one piece of JSON; hand the answer characters it completed to `on_delta`."""
        delta = self.field.feed(piece)
        if delta:
            self.shown.append(delta)
            on_delta(delta)

    def stop(self, *, reports_finish: bool) -> Stop:
        """Return how the stream ended: normally, short of its end, or with a refusal."""
        if self.refused or self.finish in _REFUSED:
            return "refused"
        if self.finish is None:
            # A stream without a finish was cut, unless the provider never says (fakes, others).
            return "incomplete" if reports_finish else "normal"
        return "normal" if self.finish in _NORMAL else "incomplete"

    def parsed(self) -> dict[str, JsonValue] | None:
        """Return the complete JSON object the model wrote, or None when it is not one."""
        try:
            value = json.loads(self.field.text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


def output_cap_kwargs(provider: str, max_tokens: int | None) -> dict[str, int]:
    """Return the request arguments that cap a call's output at `max_tokens` ({}: the model's own cap)."""
    if max_tokens is None:
        return {}
    return {"num_predict" if provider == "ollama" else "max_tokens": max_tokens}


def structured_method(entry: ChainEntry) -> Method:
    """Return how `entry`'s model is asked for the schema."""
    name = entry.spec.partition(":")[2].lower()
    if entry.provider == "openai" and not (name.startswith(_TOOLS_ONLY_OPENAI) or name == "gpt-4"):
        return "json_schema"
    return "tools"


def _bound(entry: ChainEntry, schema: dict[str, JsonValue], method: Method) -> Any:
    if method == "json_schema":
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": schema["title"], "description": schema.get("description", ""), "schema": schema},
        }
        return entry.model.bind(response_format=response_format)
    return entry.model.bind_tools([schema], tool_choice=str(schema["title"]))


async def stream_structured(
    entry: ChainEntry,
    messages: Sequence[BaseMessage],
    schema: dict[str, JsonValue],
    *,
    limits: Limits,
    on_delta: Callable[[str], None],
    into: Streamed,
    max_tokens: int | None = None,
) -> None:
    """Stream `entry`'s structured answer into `into`, handing answer text to `on_delta`.

    `max_tokens`: this call's output cap, when lower than the model's own (a budget's room).
    Raises StreamTimeout when a limit passes, and the provider's own exception when the call
    fails; `into` then holds what came before.
    """
    method = structured_method(entry)
    cap = output_cap_kwargs(entry.provider, max_tokens)
    reader = open_stream(entry.model, messages, schema, method, cap)
    loop = asyncio.get_running_loop()
    started = loop.time()

    def due() -> float:
        if into.shown:
            return min(loop.time() + limits.idle, limits.deadline)
        return min(started + limits.first_token, limits.deadline)

    try:
        async with asyncio.timeout_at(due()) as timer:
            if reader is not None:
                progress = Progress()
                try:
                    # aclosing: however the loop ends, the response is closed now, not when collected.
                    async with aclosing(reader(progress)) as pieces:
                        async for piece in pieces:
                            if piece:
                                into.hand_out(piece, on_delta)
                            timer.reschedule(due())
                finally:
                    into.finish, into.refused = progress.finish, progress.refused
                    into.text_only, into.usage = progress.text_only, progress.usage
            else:
                runnable = _bound(entry, schema, method).bind(**cap) if cap else _bound(entry, schema, method)
                openai_usage = entry.provider == "openai"
                async for chunk in runnable.astream(list(messages)):
                    _read(chunk, method, into, on_delta, replace_usage=openai_usage)
                    timer.reschedule(due())
    except TimeoutError as exc:
        if loop.time() >= limits.deadline:
            raise StreamTimeout("total") from exc
        raise StreamTimeout("idle" if into.shown else "first_token") from exc
    except Exception as exc:
        # The OpenAI SDK's stream helper raises at the end instead of returning the finish.
        name = type(exc).__name__
        if name == "LengthFinishReasonError":
            into.finish = "length"
        elif name == "ContentFilterFinishReasonError":
            into.finish = "content_filter"
        else:
            raise


def _read(chunk: Any, method: Method, into: Streamed, on_delta: Callable[[str], None], *, replace_usage: bool) -> None:
    """Take one chunk: its piece of JSON, its finish reason, refusal and usage."""
    piece = ""
    if method == "tools":
        calls = getattr(chunk, "tool_call_chunks", None)
        if calls:
            piece = "".join(str(call.get("args") or "") for call in calls if call.get("index") in (0, None))
        elif getattr(chunk, "tool_calls", None):  # a model that does not stream sends the whole call
            piece = json.dumps(chunk.tool_calls[0]["args"], ensure_ascii=False)
        elif chunk.text:
            into.text_only = True
    elif isinstance(chunk.content, str):
        piece = chunk.content
    if piece:
        into.hand_out(piece, on_delta)
    metadata = chunk.response_metadata
    if metadata:
        finish = metadata.get("finish_reason") or metadata.get("stop_reason") or metadata.get("done_reason")
        if finish:
            into.finish = str(finish)
    if chunk.additional_kwargs.get("refusal"):
        into.refused = True
    usage = chunk.usage_metadata
    if usage:
        # OpenAI's stream helper repeats the usage chunk's totals on its final chunk;
        # Anthropic splits them (input in message_start, output in message_delta).
        into.usage = usage if replace_usage or into.usage is None else add_usage(into.usage, usage)
