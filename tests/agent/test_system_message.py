"""A window can be rebuilt from its parts and its cuts: what a run record relies on."""

from __future__ import annotations

import random

import pytest
from langchain_core.messages import HumanMessage

from chatbot.agent._prompts import system_prompt
from chatbot.agent._window import Window, WindowInputs, build_window
from chatbot.agent.system_message import compose_system_text, shorten_question
from chatbot.responses import QuotedChunk
from tests.agent.test_window import COUNTERS, make_inputs, meta, random_history
from tests.fixtures.token_corpus import ENGLISH_PARAGRAPHS, PERSIAN_PARAGRAPHS


def assert_rebuilt(window: Window, inputs: WindowInputs) -> None:
    """Assert the system message and the question are what the parts and cuts give."""
    assert window.cuts is not None
    system = compose_system_text(inputs.system_parts, window.cuts)
    assert system == window.messages[0].content
    question = str(inputs.question.content)
    sent = question if window.question_chars is None else shorten_question(question, window.question_chars)
    assert sent == window.messages[-1].content
    assert window.question_shortened == (window.question_chars is not None)


@pytest.mark.parametrize("counter_name", COUNTERS)
def test_every_window_is_rebuilt_exactly_from_its_parts_and_cuts(counter_name: str) -> None:
    counter = COUNTERS[counter_name]
    rng = random.Random(f"rebuild-{counter_name}")
    cut_kinds: set[str] = set()
    for _ in range(20):
        inputs = make_inputs(rng, random_history(rng, rng.randint(0, 12)), language=rng.choice(["fa", "en"]))
        if rng.random() < 0.3:  # a question too long for the budget
            long = " ".join(PERSIAN_PARAGRAPHS if rng.random() < 0.5 else ENGLISH_PARAGRAPHS)
            inputs = WindowInputs(**{**inputs.__dict__, "question": HumanMessage(long, additional_kwargs=meta(1))})
        for budget in [200, 400, 700, 1500, 6000, rng.randint(150, 4000)]:
            window = build_window(inputs, budget=budget, counter=counter)
            assert_rebuilt(window, inputs)
            assert window.cuts is not None
            if window.cuts.chunks_kept < len(inputs.chunks) or window.cuts.chunk_permille < 1000:
                cut_kinds.add("chunks")
            if window.question_chars is not None:
                cut_kinds.add("question")
    assert cut_kinds == {"chunks", "question"}  # the sweep did exercise the cuts


def test_a_runaway_summary_cut_from_the_whole_system_text_is_rebuilt_too() -> None:
    inputs = WindowInputs(
        system_prompt=system_prompt("fa"),
        profile={},
        facts=[],
        summary="خلاصه " * 3000,
        chunks=[QuotedChunk(chunk_id="kb-1", title="t", text="متن " * 50, language="fa")],
        history=[],
        question=HumanMessage("فرانشیز چیست؟"),
    )
    window = build_window(inputs, budget=400, counter=COUNTERS["o200k"])
    assert window.system_shortened and window.cuts is not None and window.cuts.system_chars is not None
    assert_rebuilt(window, inputs)
