"""The window builder: budget, shape, tool-pair integrity, the question, untouched inputs."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chatbot.agent._prompts import system_prompt
from chatbot.agent._tokens import TokenCounter, token_counter_for
from chatbot.agent._window import Window, WindowInputs, build_window, format_system_prompt
from chatbot.responses import QuotedChunk
from tests.fixtures.token_corpus import ENGLISH_PARAGRAPHS, PERSIAN_PARAGRAPHS

COUNTERS = {"o200k": token_counter_for("openai:gpt-4o-mini"), "approximate": token_counter_for("offline")}


def meta(i: int) -> dict[str, Any]:
    """Return the bookkeeping a persisted message carries."""
    return {
        "chatbot": {
            "created_at": f"2025-01-01T00:00:{i:02d}Z",
            "run_id": f"run-{i}",
            "citations": ["kb-1"],
            "status": "answered",
        }
    }


def random_history(rng: random.Random, turns: int, *, broken: bool = False) -> list[BaseMessage]:
    """Return a transcript of Persian and English turns, some with tool calls, optionally broken."""
    texts = [*PERSIAN_PARAGRAPHS, *ENGLISH_PARAGRAPHS]
    history: list[BaseMessage] = []
    for turn in range(turns):
        history.append(HumanMessage(rng.choice(texts), additional_kwargs=meta(turn)))
        if rng.random() < 0.3:
            ids = [f"call-{turn}-{k}" for k in range(rng.randint(1, 2))]
            calls = [{"name": "search_kb", "args": {"q": rng.choice(texts)[:40]}, "id": i} for i in ids]
            history.append(AIMessage("", tool_calls=calls, additional_kwargs=meta(turn)))
            answered = ids if not broken or rng.random() < 0.5 else ids[:-1]
            history.extend(ToolMessage(rng.choice(texts)[:200], tool_call_id=i) for i in answered)
        if broken and rng.random() < 0.15:
            history.append(ToolMessage("stray result", tool_call_id=f"nobody-{turn}"))
        history.append(AIMessage(rng.choice(texts), additional_kwargs=meta(turn)))
    return history


def make_inputs(rng: random.Random, history: Sequence[BaseMessage], *, language: str = "fa") -> WindowInputs:
    """Return window inputs around `history` with a profile, facts, summary and three chunks."""
    source = PERSIAN_PARAGRAPHS if language == "fa" else ENGLISH_PARAGRAPHS
    chunks: list[QuotedChunk] = [
        QuotedChunk(chunk_id=f"kb-{k}", title=f"Article {k}", text=" ".join(rng.sample(source, 3)), language=language)
        for k in range(3)
    ]
    return WindowInputs(
        system_prompt=system_prompt(language),
        profile={"name": "Sara", "policies": ["motor-778123"], "empty": ""},
        facts=["drives a 2016 sedan"],
        summary="- User asked: about excess",
        chunks=chunks,
        history=list(history),
        question=HumanMessage(rng.choice(source), additional_kwargs=meta(99)),
    )


def assert_no_orphans(messages: Sequence[BaseMessage]) -> None:
    """Assert every tool call is answered right after it and every tool result has its call."""
    pending: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in pending, f"orphan tool result {message.tool_call_id}"
            pending.discard(message.tool_call_id)
            continue
        assert not pending, f"unanswered tool calls {pending}"
        if isinstance(message, AIMessage):
            pending = {str(c["id"]) for c in [*message.tool_calls, *message.invalid_tool_calls]}
            raw = message.additional_kwargs.get("tool_calls", [])
            assert {c["id"] for c in raw} <= pending
            blocks = message.content if isinstance(message.content, list) else []
            assert {b["id"] for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"} <= pending
    assert not pending, f"unanswered tool calls {pending}"


def assert_window_invariants(
    window: Window, inputs: WindowInputs, budget: int, counter: TokenCounter, *, well_formed: bool = False
) -> None:
    """Assert the rules every window obeys, whatever the budget and history."""
    messages = window.messages
    assert window.tokens == counter.count_messages(messages) <= budget
    assert isinstance(messages[0], SystemMessage)
    assert sum(isinstance(m, SystemMessage) for m in messages) == 1
    assert isinstance(messages[1], HumanMessage)
    assert isinstance(messages[-1], HumanMessage)
    question = str(inputs.question.content)
    last = str(messages[-1].content)
    if window.question_shortened:
        assert question.startswith(last.rsplit(" …", 1)[0][:20])
    else:
        assert last == question
    assert_no_orphans(messages)
    assert all("chatbot" not in m.additional_kwargs for m in messages)
    history = inputs.history
    assert 0 <= window.first_kept <= len(history)
    kept = messages[1:-1]
    if kept:
        assert isinstance(history[window.first_kept], HumanMessage)
        suffix = [m.content for m in history[window.first_kept :]]
        if well_formed:
            assert [m.content for m in kept] == suffix
        else:  # orphans left out, nothing reordered or invented
            remaining = iter(suffix)
            assert all(any(m.content == c or isinstance(m, AIMessage) for c in remaining) for m in kept)
            assert kept[0].content == suffix[0]
    else:
        assert window.first_kept == len(history)


@pytest.mark.parametrize("counter_name", COUNTERS)
@pytest.mark.parametrize("broken", [False, True])
def test_window_invariants_over_budgets_and_histories(counter_name: str, broken: bool) -> None:
    counter = COUNTERS[counter_name]
    rng = random.Random(f"{counter_name}-{broken}")
    for case in range(25):
        history = random_history(rng, rng.randint(0, 30), broken=broken)
        inputs = make_inputs(rng, history, language=rng.choice(["fa", "en"]))
        before = copy.deepcopy(inputs)
        for budget in [60, 120, 250, 500, 900, 1500, 3000, 6000, 20000, rng.randint(60, 8000)]:
            window = build_window(inputs, budget=budget, counter=counter)
            assert_window_invariants(window, inputs, budget, counter, well_formed=not broken)
        assert inputs == before, f"inputs changed in case {case}"


def test_generous_budget_keeps_everything_and_strips_metadata() -> None:
    rng = random.Random(1)
    history = random_history(rng, 8)
    inputs = make_inputs(rng, history)
    window = build_window(inputs, budget=100_000, counter=COUNTERS["o200k"])
    assert window.first_kept == 0
    assert [m.content for m in window.messages[1:-1]] == [m.content for m in history]
    assert not (window.chunks_shortened or window.question_shortened or window.system_shortened)
    assert all(m.additional_kwargs == {} for m in window.messages)
    assert all(m.additional_kwargs["chatbot"]["run_id"] for m in history if not isinstance(m, ToolMessage))


def test_longest_suffix_that_fits_is_kept() -> None:
    rng = random.Random(2)
    counter = COUNTERS["o200k"]
    history = random_history(rng, 20)
    inputs = make_inputs(rng, history)
    window = build_window(inputs, budget=3000, counter=counter)
    earlier = [i for i, m in enumerate(history[: window.first_kept]) if isinstance(m, HumanMessage)]
    assert earlier, "the budget should have dropped some turns"
    longer = [window.messages[0], *history[earlier[-1] :], window.messages[-1]]
    assert counter.count_messages(longer) > 3000


def test_broken_history_is_repaired_in_the_window_only() -> None:
    history: list[BaseMessage] = [
        ToolMessage("result without a call", tool_call_id="ghost"),
        HumanMessage("What does my policy cover?"),
        AIMessage(
            "",
            tool_calls=[{"name": "search_kb", "args": {}, "id": "a"}, {"name": "x", "args": {}, "id": "b"}],
            additional_kwargs={"tool_calls": [{"id": "a", "type": "function"}, {"id": "b", "type": "function"}]},
        ),
        ToolMessage("hit a", tool_call_id="a"),
        ToolMessage("hit a again", tool_call_id="a"),
        AIMessage("Fire and theft [chunk:kb-1]."),
        HumanMessage("And floods?"),
        AIMessage(
            [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "c", "name": "s", "input": {}},
            ],
            tool_calls=[{"name": "s", "args": {}, "id": "c"}],
        ),
        HumanMessage("Hello?"),
        AIMessage("", tool_calls=[{"name": "search_kb", "args": {}, "id": "d"}]),
    ]
    inputs = WindowInputs(
        system_prompt=system_prompt("en"),
        profile={},
        facts=[],
        summary="",
        chunks=[],
        history=history,
        question=HumanMessage("Are floods covered?"),
    )
    before = copy.deepcopy(inputs)
    window = build_window(inputs, budget=4000, counter=COUNTERS["o200k"])
    assert_window_invariants(window, inputs, 4000, COUNTERS["o200k"])
    contents = [m.content for m in window.messages[1:-1]]
    assert "result without a call" not in contents and "hit a again" not in contents
    call = window.messages[2]
    assert isinstance(call, AIMessage)
    assert call.tool_calls == [{"name": "search_kb", "args": {}, "id": "a", "type": "tool_call"}]
    # The unanswered call is gone from the Anthropic-style content too.
    assert window.messages[6].content == [{"type": "text", "text": "Checking."}]
    assert window.messages[-2].content == "Hello?"  # the trailing call with no result left the window
    assert inputs == before


def test_question_alone_over_budget_is_shortened_after_the_chunks() -> None:
    rng = random.Random(3)
    inputs = make_inputs(rng, random_history(rng, 5))
    long_question = HumanMessage(" ".join(PERSIAN_PARAGRAPHS), additional_kwargs=meta(1))
    inputs = WindowInputs(**{**inputs.__dict__, "question": long_question})
    for counter in COUNTERS.values():
        window = build_window(inputs, budget=700, counter=counter)
        assert window.chunks_shortened and window.question_shortened and not window.system_shortened
        assert window.first_kept == len(inputs.history)
        asked = str(window.messages[-1].content)
        assert asked.endswith("[کوتاه‌شده]") and str(long_question.content).startswith(asked.split(" …")[0])
        assert len(asked) >= 400
        system = str(window.messages[0].content)
        assert "kb-0" not in system and "جا نشدند" in system  # no room for any chunk, and it says so
        assert_window_invariants(window, inputs, 700, counter)


def test_chunks_give_way_before_the_question() -> None:
    rng = random.Random(4)
    inputs = make_inputs(rng, [])
    counter = COUNTERS["o200k"]
    full = build_window(inputs, budget=100_000, counter=counter)
    window = build_window(inputs, budget=full.tokens - 150, counter=counter)
    assert window.chunks_shortened and not window.question_shortened
    assert window.messages[-1].content == inputs.question.content
    system = str(window.messages[0].content)
    assert "[chunk:kb-0]" in system
    assert "[truncated]" in system or "[کوتاه‌شده]" in system


def test_runaway_system_text_is_cut_and_tiny_budgets_refused() -> None:
    inputs = WindowInputs(
        system_prompt=system_prompt("fa"),
        profile={},
        facts=[],
        summary="خلاصه " * 3000,
        chunks=[],
        history=[],
        question=HumanMessage("فرانشیز چیست؟"),
    )
    window = build_window(inputs, budget=400, counter=COUNTERS["o200k"])
    assert window.system_shortened and not window.question_shortened
    assert str(window.messages[0].content).startswith(system_prompt("fa")[:50])
    assert window.messages[-1].content == "فرانشیز چیست؟"
    with pytest.raises(ValueError, match="budget"):
        build_window(inputs, budget=5, counter=COUNTERS["o200k"])


def test_system_prompt_sections_follow_the_prompt_language() -> None:
    chunks = [QuotedChunk(chunk_id="kb-7", title="Deductible", text="Ten percent.", language="en")]
    fa = format_system_prompt(
        system_prompt("fa"),
        profile={"city": "تهران"},
        facts=["پژو ۲۰۶"],
        summary="- قبلاً پرسید",
        chunks=chunks,
    )
    assert "نمایه کاربر" in fa and "- city: تهران" in fa and "[chunk:kb-7] Deductible\nTen percent." in fa
    en = format_system_prompt(system_prompt("en"), profile={}, facts=[], summary="", chunks=[])
    assert "User profile" not in en and "No relevant chunk" in en
