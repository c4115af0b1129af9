"""Build the token-budgeted window of messages the chat model sees on one turn.

Postgres keeps the full transcript; only this window is trimmed (the record is never cut
to fit a model; docs/records.md).
LangChain's `trim_messages` is not enough here: it has no tool-pair logic, keeps the
orphans of an already-broken history, and silently drops the current question when the
turn alone is over budget. The builder never writes state: it returns copies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import InvalidToolCall, ToolCall
from pydantic import JsonValue

from chatbot.agent._prompts import TRUNCATION_MARKERS
from chatbot.agent._tokens import TokenCounter
from chatbot.agent.system_message import (
    SystemCuts,
    SystemParts,
    compose_system_text,
    cut_text,
    format_system_prompt,
    shorten_question,
)
from chatbot.recall.service import RecalledTurn
from chatbot.responses import QuotedChunk
from chatbot.text import looks_persian
from chatbot.turns import META_KEY

__all__ = [
    "SystemCuts",
    "Window",
    "WindowInputs",
    "build_window",
    "compose_system_text",
    "format_system_prompt",
    "shorten_question",
    "strip_metadata",
]

# Below this many characters the question loses its meaning; the system text (summary,
# facts, profile) is cut before the question goes shorter.
QUESTION_FLOOR_CHARS = 400
# Chunks cut below a quarter of their text are of little use; drop the lowest instead.
CHUNK_MIN_FRACTION = 250  # per mille
_TOOL_BLOCK_TYPES = {"tool_use", "tool_call", "function_call", "server_tool_use"}


@dataclass(frozen=True, kw_only=True)
class WindowInputs:
    """Everything the window is built from; nothing in it is modified."""

    system_prompt: str
    profile: Mapping[str, JsonValue]
    facts: Sequence[str]
    summary: str
    chunks: Sequence[QuotedChunk]
    history: Sequence[BaseMessage]
    question: HumanMessage

    @property
    def system_parts(self) -> SystemParts:
        """The parts the system message is composed from (no recalled turns: `Window.with_recalled` adds them)."""
        return SystemParts(
            prompt=self.system_prompt, profile=self.profile, facts=self.facts, summary=self.summary, chunks=self.chunks
        )


@dataclass(frozen=True)
class _Walk:
    """The window's one walk back through the history: every suffix it may keep, longest first.

    Kept beside the window so a smaller budget for the recent turns (recall taking its
    share, agent/_recall.py) picks a shorter suffix of the same walk instead of building
    the window again.
    """

    prepared: list[BaseMessage]
    """The history messages walked, oldest first, as the provider gets them."""
    starts: list[tuple[int, int, int]]
    """(messages kept counted from the end, their tokens, the first one's history index), longest first."""
    base: int
    """The tokens of the system message and the question alone."""
    history_len: int
    counter: TokenCounter

    def select(self, system: BaseMessage, question: BaseMessage, budget: int) -> tuple[list[BaseMessage], int, int]:
        """Return the messages, their tokens and the first kept index of the longest suffix within `budget`."""
        # Our counters are additive; any other counter gets the whole window recounted, and a
        # shorter suffix when the sum was optimistic.
        additive = getattr(self.counter, "additive", False)
        for kept_len, kept_tokens, first_kept in self.starts:
            if self.base + kept_tokens > budget:  # past where a walk under this budget stops
                continue
            messages = [system, *self.prepared[len(self.prepared) - kept_len :], question]
            tokens = self.base + kept_tokens if additive else self.counter.count_messages(messages)
            if tokens <= budget:
                return messages, tokens, first_kept
        return [system, question], self.base, self.history_len


@dataclass(frozen=True)
class Window:
    """The messages the model sees, their token count and what had to give way."""

    messages: list[BaseMessage]
    tokens: int
    first_kept: int
    chunks_shortened: bool
    question_shortened: bool
    system_shortened: bool = False
    question_chars: int | None = None
    """The question's kept length when it was shortened (see `shorten_question`)."""
    cuts: SystemCuts | None = None
    """How the system message was built from its parts (see `compose_system_text`)."""
    parts: SystemParts | None = None
    """What the system message was composed from (`build_window` sets it)."""
    walk: _Walk | None = None
    """The walk its recent turns were chosen from (`build_window` sets it)."""

    def with_recalled(self, turns: Sequence[RecalledTurn], language: str, tokens: int, budget: int) -> Window | None:
        """Return the window with recalled turns closing its system message, or None when they do not fit.

        `tokens` is what their section costs: the recent turns give that much room (a
        shorter suffix of the same walk; a window its message count bounded has the room
        already). None when the system message and the question alone would leave too little:
        recall never cuts what the window kept without it.
        """
        if self.parts is None or self.walk is None or self.cuts is None:
            raise ValueError("only a window build_window made can take recalled turns")
        if self.walk.base + tokens > budget:
            return None
        messages, kept_tokens, first_kept = self.walk.select(self.messages[0], self.messages[-1], budget - tokens)
        parts = replace(self.parts, recalled=tuple(turns), language=language)
        system = SystemMessage(compose_system_text(parts, self.cuts))
        return replace(
            self, messages=[system, *messages[1:]], tokens=kept_tokens + tokens, first_kept=first_kept, parts=parts
        )


def strip_metadata(message: BaseMessage, **update: Any) -> BaseMessage:
    """Return a deep copy of `message` without our metadata, with `update` applied.

    Persisted messages carry our bookkeeping (chatbot/turns.py); providers must never see it.
    """
    kwargs = {key: value for key, value in message.additional_kwargs.items() if key != META_KEY}
    return message.model_copy(update={"additional_kwargs": kwargs, **update}, deep=True)


@dataclass(frozen=True)
class _Entry:
    """A history message that may enter the window, with the tool-call ids it keeps."""

    index: int
    message: BaseMessage
    keep_calls: frozenset[str] | None = None  # None: the message is sent as it is


def _call_ids(message: AIMessage) -> list[str]:
    return [str(call["id"]) for call in [*message.tool_calls, *message.invalid_tool_calls] if call.get("id")]


def _has_text(message: BaseMessage) -> bool:
    content = message.content
    if isinstance(content, str):
        return bool(content.strip())
    return any(not (isinstance(b, dict) and b.get("type") in _TOOL_BLOCK_TYPES) for b in content)


def _with_results(history: Sequence[BaseMessage], index: int, end: int) -> list[_Entry]:
    """Return the AIMessage at `index` and the results in history[index+1:end] that answer it."""
    message = history[index]
    assert isinstance(message, AIMessage)
    calls = _call_ids(message)
    results: list[_Entry] = []
    answered: set[str] = set()
    for j in range(index + 1, end):
        result = history[j]
        assert isinstance(result, ToolMessage)
        # Duplicate results and results of another message's calls are orphans: skipped.
        if result.tool_call_id in calls and result.tool_call_id not in answered:
            answered.add(result.tool_call_id)
            results.append(_Entry(j, result))
    if not answered and not _has_text(message):
        return []  # only unanswered calls: nothing left to send
    keep = None if answered == set(calls) else frozenset(answered)
    return [_Entry(index, message, keep), *results]


def _repaired_backwards(history: Sequence[BaseMessage]) -> Iterator[_Entry]:
    """Yield, newest first, the history messages a provider accepts, leaving orphans out.

    Providers reject a tool call without its result and a tool result without its call;
    they also want the results right after the calling message. A run killed mid-way, or
    an older bug, can leave either kind of orphan in the persisted transcript. Lazy and
    backwards, so a turn costs what its window holds, not what the thread has accumulated.
    """
    i = len(history) - 1
    while i >= 0:
        message = history[i]
        if isinstance(message, ToolMessage | AIMessage):
            start = i
            while start >= 0 and isinstance(history[start], ToolMessage):
                start -= 1
            if start >= 0 and isinstance(history[start], AIMessage):
                yield from reversed(_with_results(history, start, i + 1))
                i = start - 1
            else:  # results with no calling message right before them: orphans
                i = start
            continue
        if isinstance(message, HumanMessage):
            yield _Entry(i, message)
        # SystemMessages and other types never belong in the window's history.
        i -= 1


class _CallsKept(TypedDict, total=False):
    """What `_prepare` replaces in a copied AI message: its calls, and its content blocks when it has them."""

    tool_calls: list[ToolCall]
    invalid_tool_calls: list[InvalidToolCall]
    content: list[str | dict[Any, Any]]


def _prepare(entry: _Entry) -> BaseMessage:
    """Copy one history message for the provider: metadata stripped, unanswered calls removed."""
    message = entry.message
    if entry.keep_calls is None or not isinstance(message, AIMessage):
        return strip_metadata(message)
    keep = entry.keep_calls
    update: _CallsKept = {
        "tool_calls": [c for c in message.tool_calls if c.get("id") in keep],
        "invalid_tool_calls": [c for c in message.invalid_tool_calls if c.get("id") in keep],
    }
    if not isinstance(message.content, str):
        # Anthropic-style content carries the calls as tool_use blocks too.
        update["content"] = [
            b
            for b in message.content
            if not (isinstance(b, dict) and b.get("type") in _TOOL_BLOCK_TYPES and b.get("id") not in keep)
        ]
    copy = strip_metadata(message, **update)
    # OpenAI-style raw calls in additional_kwargs are sent when `tool_calls` is empty.
    raw = copy.additional_kwargs.get("tool_calls")
    if isinstance(raw, list):
        kept_raw = [c for c in raw if isinstance(c, dict) and c.get("id") in keep]
        if kept_raw:
            copy.additional_kwargs["tool_calls"] = kept_raw
        else:
            del copy.additional_kwargs["tool_calls"]
    copy.additional_kwargs.pop("function_call", None)
    return copy


def _largest_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
    """Return the largest x in [lo, hi] with fits(x), assuming fits is (nearly) monotone."""
    if hi < lo or not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class _Core:
    """The system message and the question, shortened until they fit the budget."""

    def __init__(self, inputs: WindowInputs, budget: int, counter: TokenCounter) -> None:
        self.inputs, self.budget, self.counter = inputs, budget, counter
        self.lang = "fa" if looks_persian(inputs.system_prompt) else "en"
        question_text = str(inputs.question.text)
        self.question_text = question_text
        self.question = strip_metadata(inputs.question)
        self.chunks_shortened = self.question_shortened = self.system_shortened = False
        self.question_chars: int | None = None
        self.parts = inputs.system_parts
        self.cuts = SystemCuts(len(inputs.chunks))
        self.system_text = self._system(self.cuts)

    def _system(self, cuts: SystemCuts) -> str:
        return compose_system_text(self.parts, cuts)

    def _fits(self, system_text: str, question: BaseMessage) -> bool:
        return self.counter.count_messages([SystemMessage(system_text), question]) <= self.budget

    def _cut_chunks(self, count: int, permille: int) -> str:
        return self._system(SystemCuts(count, permille))

    def _chunks_fit(self, count: int, permille: int) -> bool:
        return self._fits(self._cut_chunks(count, permille), self.question)

    def _system_fits(self, full: str, question: BaseMessage, length: int) -> bool:
        return self._fits(cut_text(full, length, TRUNCATION_MARKERS[self.lang]), question)

    def _question_fits(self, system_text: str, length: int) -> bool:
        return self._fits(system_text, self._question(length))

    def _set_question(self, length: int) -> None:
        self.question = self._question(length)
        self.question_shortened = length < len(self.question_text)
        self.question_chars = length if self.question_shortened else None

    def _question(self, length: int) -> BaseMessage:
        return self.question.model_copy(update={"content": shorten_question(self.question_text, length)})

    def window(self, messages: list[BaseMessage], tokens: int, first_kept: int, walk: _Walk) -> Window:
        """Return the Window with what this core had to shorten."""
        return Window(
            messages,
            tokens,
            first_kept,
            self.chunks_shortened,
            self.question_shortened,
            self.system_shortened,
            self.question_chars,
            self.cuts,
            self.parts,
            walk,
        )

    def fit(self) -> None:
        """Shorten chunk text, then the question, then the system text until both fit."""
        if self._fits(self.system_text, self.question):
            return
        self.chunks_shortened = bool(self.inputs.chunks)
        # Keep the best-ranked chunks whole-ish rather than every chunk in crumbs.
        for count in range(len(self.inputs.chunks), 0, -1):
            permille = _largest_fitting(
                CHUNK_MIN_FRACTION if count > 1 else 0,
                1000,
                partial(self._chunks_fit, count),
            )
            if permille is not None:
                self.cuts = SystemCuts(count, permille)
                self.system_text = self._system(self.cuts)
                return
        self.cuts = SystemCuts(0, chunks_omitted=bool(self.inputs.chunks))
        self.system_text = self._system(self.cuts)
        if self._fits(self.system_text, self.question):
            return
        floor = min(QUESTION_FLOOR_CHARS, len(self.question_text))
        length = _largest_fitting(floor, len(self.question_text), partial(self._question_fits, self.system_text))
        if length is not None:
            self._set_question(length)
            return
        # The prompt, profile, facts and summary alone are over budget: a misconfigured
        # budget or a runaway summary. Cut them from the end, so the instructions survive,
        # and give the question whatever is left when even the prompt cannot stay.
        self.system_shortened = True
        full = self.system_text
        length = _largest_fitting(0, len(full), partial(self._system_fits, full, self._question(floor)))
        if length is not None:
            self.cuts = replace(self.cuts, system_chars=length)
            self.system_text = self._system(self.cuts)
            self._set_question(floor)
            return
        self.cuts = replace(self.cuts, system_chars=0)
        self.system_text = self._system(self.cuts)
        length = _largest_fitting(0, floor, partial(self._question_fits, self.system_text))
        if length is None:
            raise ValueError(f"budget of {self.budget} tokens is below the cost of a minimal system and user message")
        self._set_question(length)


def build_window(inputs: WindowInputs, *, budget: int, counter: TokenCounter) -> Window:
    """Build the model's window: system message, the recent turns that fit, the question.

    The kept history is the longest suffix starting on a human message that fits after the
    system message and the question; orphan tool calls and results are left out of it.
    """
    core = _Core(inputs, budget, counter)
    core.fit()
    system = SystemMessage(core.system_text)
    empty = counter.count_messages([])
    base = counter.count_messages([system, core.question])
    # Walk back from the newest message; every human message is a legal start.
    prepared: list[BaseMessage] = []
    starts: list[tuple[int, int, int]] = []  # (messages kept counted from the end, their tokens, first index)
    spent = 0
    for entry in _repaired_backwards(inputs.history):
        message = _prepare(entry)
        spent += counter.count_messages([message]) - empty
        if base + spent > budget:
            break
        prepared.append(message)
        if isinstance(message, HumanMessage):
            starts.append((len(prepared), spent, entry.index))
    prepared.reverse()
    starts.reverse()  # longest suffix first
    walk = _Walk(prepared, starts, base, len(inputs.history), counter)
    messages, tokens, first_kept = walk.select(system, core.question, budget)
    return core.window(messages, tokens, first_kept, walk)
