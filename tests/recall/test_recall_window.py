"""Recalled turns take their room from the window's own walk: the window a build at the smaller budget keeps.

Before, the window was built again with the section's cost taken off the budget; now it
picks the shorter suffix from the walk it was built from (`Window.with_recalled`). This
holds the two equal, message for message, and the system text to what its parts compose.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from chatbot.agent._window import Window, build_window
from chatbot.agent.system_message import compose_system_text, recalled_part
from chatbot.recall.service import RecalledTurn
from tests.agent.test_window import COUNTERS, make_inputs, random_history
from tests.fixtures.token_corpus import ENGLISH_PARAGRAPHS, PERSIAN_PARAGRAPHS


def _shortened(window: Window) -> tuple[bool, bool, bool]:
    return window.question_shortened, window.chunks_shortened, window.system_shortened


def _recalled_turns(rng: random.Random, language: str) -> list[RecalledTurn]:
    """Return one to four earlier turns in `language`, oldest first, as recall would give them."""
    texts = PERSIAN_PARAGRAPHS if language == "fa" else ENGLISH_PARAGRAPHS
    roles = ["user", "assistant"]
    return [
        RecalledTurn(f"r{k}", 2 * k + rng.randint(0, 1), rng.choice(roles), None, rng.choice(texts))
        for k in range(rng.randint(1, 4))
    ]


@pytest.mark.parametrize("counter_name", COUNTERS)
def test_recalled_turns_leave_the_window_a_build_at_the_smaller_budget_keeps(counter_name: str) -> None:
    counter, rng = COUNTERS[counter_name], random.Random(f"recall-room-{counter_name}")
    seen: set[str] = set()
    for language in rng.choices(["fa", "en"], k=20):
        inputs = make_inputs(rng, random_history(rng, rng.randint(0, 20), broken=rng.random() < 0.3), language=language)
        turns = _recalled_turns(rng, language)
        cost = counter.count_text(recalled_part(turns, language))
        for budget in [1500, 3000, 6000, rng.randint(cost + 300, 8000)]:
            window = build_window(inputs, budget=budget, counter=counter)
            if any(_shortened(window)):
                continue  # recall does not run on a window that cut something (agent/_recall.py)
            recalled = window.with_recalled(turns, language, cost, budget)
            try:
                smaller: Window | None = build_window(inputs, budget=budget - cost, counter=counter)
            except ValueError:  # not even a minimal system message and question fit
                smaller = None
            if smaller is None or any(_shortened(smaller)):
                assert recalled is None, "recall cut what the window kept without it"
                seen.add("gave way")
                continue
            assert recalled is not None
            assert recalled.messages[1:] == smaller.messages[1:]
            assert (recalled.first_kept, recalled.tokens) == (smaller.first_kept, smaller.tokens + cost)
            seen.add("fewer recent turns" if recalled.first_kept > window.first_kept else "room already there")
            text = str(recalled.messages[0].content)
            assert recalled.cuts is not None and recalled.parts is not None
            assert text == compose_system_text(
                replace(inputs.system_parts, recalled=turns, language=language), recalled.cuts
            )
            assert text.startswith(str(window.messages[0].content))
            assert all(t.content in text for t in turns)
    assert seen == {"gave way", "fewer recent turns", "room already there"}  # the sweep met every case
