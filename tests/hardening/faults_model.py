"""A chat model that fails on cue: hangs, raises, or streams garbage, before or after its first token.

The test calls `FaultScript.set` before each run; every copy LangChain makes
of the model (`bind_tools`, `with_structured_output`) shares the one script object.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage, ToolCallChunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult

from tests.fixtures.wait import forever

TOOL = "StructuredAnswer"  # the title of the schema `ask_model` asks for
PIECE = 9  # characters of tool-call arguments per streamed chunk (more for a huge answer)
MAX_PIECES = 20  # the streaming parse is quadratic in pieces x length (docs/measurements/reliability.md)


class ProviderError(Exception):
    """What a provider SDK raises: an HTTP status and a message quoting the provider."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass
class FaultScript:
    """What the model does on its next calls."""

    mode: str = "answer"
    """answer | hang | hang-mid | raise | raise-mid | raw-args | content-only."""
    answer: str = "Your policy covers emergency medical costs abroad up to the stated limit."
    status: Any = "answered"

    def set(self, mode: str = "answer", **fields: Any) -> None:
        """Script the next calls: `mode` and any field; the rest back to a working model."""
        fresh = FaultScript(mode=mode, **fields)
        self.mode, self.answer, self.status = fresh.mode, fresh.answer, fresh.status


def _chunk(args: str, first: bool) -> ChatGenerationChunk:
    piece: ToolCallChunk = {
        "name": TOOL if first else None,
        "args": args,
        "id": "call_1" if first else None,
        "index": 0,
    }
    return ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[piece]))


class FaultModel(BaseChatModel):
    """Streams a structured answer as tool-call arguments, or fails as its script says."""

    script: Any = None

    @property
    def _llm_type(self) -> str:
        return "faulty"

    def bind_tools(self, tools: Any, **kwargs: Any) -> FaultModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("async only")

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        script: FaultScript = self.script
        if script.mode == "hang":
            await forever()
        if script.mode == "raise":
            raise ProviderError("provider said: overloaded", 529)
        if script.mode == "content-only":  # prose instead of the tool call it was asked for
            yield ChatGenerationChunk(message=AIMessageChunk(content=script.answer))
            return
        if script.mode == "raw-args":  # arguments that are not JSON at all
            arguments = script.answer
        else:
            arguments = json.dumps({"status": script.status, "answer": script.answer, "citations": []})
        size = max(PIECE, len(arguments) // MAX_PIECES + 1)
        pieces = [arguments[i : i + size] for i in range(0, len(arguments), size)]
        for index, piece in enumerate(pieces):  # not polling: a faulty model's paced stream
            yield _chunk(piece, index == 0)
            if index == len(pieces) // 2 and script.mode in ("hang-mid", "raise-mid"):
                if script.mode == "hang-mid":
                    await forever()
                raise ProviderError("provider said: connection reset", 502)
