"""The rolling summary: which messages to fold, the offline summary, and a failing summariser."""

from __future__ import annotations

import asyncio
import copy
import itertools
import random

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from chatbot.agent._summary import (
    OPENING_END,
    OPENING_MAX_CHARS,
    SUMMARY_MAX_CHARS,
    fold_summary,
    messages_to_fold,
    offline_summary,
    split_opening,
)
from chatbot.agent._tokens import token_counter_for
from chatbot.agent._window import WindowInputs, build_window
from tests.fixtures.models import ScriptedChatModel
from tests.fixtures.token_corpus import PERSIAN_PARAGRAPHS


def turns(n: int, *, offset: int = 0) -> list[BaseMessage]:
    """Return n Persian question/answer turns, some with a tool call, answers citing a chunk."""
    messages: list[BaseMessage] = []
    for k in range(offset, offset + n):
        messages.append(HumanMessage(f"پرسش {k}: {PERSIAN_PARAGRAPHS[(2 * k) % len(PERSIAN_PARAGRAPHS)]}"))
        if k % 3 == 0:
            messages.append(AIMessage("", tool_calls=[{"name": "search_kb", "args": {}, "id": f"c{k}"}]))
            messages.append(ToolMessage("نتیجه جست‌وجو", tool_call_id=f"c{k}"))
        citations = [f"kb-{k}"] if k % 2 else []  # as stored: the cited chunk ids
        messages.append(
            AIMessage(
                PERSIAN_PARAGRAPHS[(2 * k + 1) % len(PERSIAN_PARAGRAPHS)],
                additional_kwargs={"chatbot": {"citations": citations, "status": "answered"}},
            )
        )
    return messages


@pytest.mark.parametrize(
    ("history_len", "upto", "first_kept", "expected"),
    [
        (40, 0, 12, (0, 12)),
        (40, 12, 20, (12, 20)),
        (40, 20, 20, (20, 20)),  # nothing newly dropped
        (40, 20, 14, (20, 20)),  # the window grew back: nothing to fold
        (40, 0, 40, (0, 40)),  # nothing kept: everything before the question
        (40, 50, 60, (40, 40)),  # stale bookkeeping is clamped to the history
    ],
)
def test_messages_to_fold(history_len: int, upto: int, first_kept: int, expected: tuple[int, int]) -> None:
    assert messages_to_fold(history_len, upto, first_kept) == expected


def test_offline_summary_lists_questions_and_topics_deterministically() -> None:
    dropped = turns(3)
    before = copy.deepcopy(dropped)
    summary = offline_summary("", dropped, "fa-IR")
    assert summary == offline_summary("", copy.deepcopy(dropped), "fa-IR")
    assert dropped == before
    lines = summary.splitlines()
    assert len(lines) == 3
    assert all(line.startswith("- کاربر پرسید: پرسش ") for line in lines)
    assert "پاسخ: kb-1" in lines[1]  # a cited answer is named by the chunks it cited
    assert "[chunk:" not in lines[0]  # an uncited one by its first sentence, without citations
    assert "User asked" in offline_summary("", dropped, "en")


def test_offline_summary_is_incremental() -> None:
    first, second = turns(4), turns(3, offset=4)
    once = offline_summary("", first, "fa")
    twice = offline_summary(once, second, "fa")
    assert twice.startswith(once)
    assert twice == offline_summary("", first + second, "fa")
    assert offline_summary(once, [], "fa") == once


def test_offline_summary_keeps_the_opening_and_the_newest_lines_within_its_bound() -> None:
    summary = ""
    for k in range(0, 60, 5):
        summary = offline_summary(summary, turns(5, offset=k), "fa")
    assert len(summary) <= SUMMARY_MAX_CHARS
    assert summary.startswith("- کاربر پرسید: پرسش 0:")  # the opening stays first
    assert "پرسش 59" in summary  # and the latest turn is there too
    assert "پرسش 30:" not in summary  # the middle gave way
    parts = split_opening(summary)
    assert parts is not None and len(parts[0]) <= OPENING_MAX_CHARS


def test_a_sixty_turn_offline_summary_still_names_what_the_conversation_opened_with() -> None:
    opening = [
        HumanMessage("My car was damaged by hail last night; claim CLM-7731 on my car body policy."),
        AIMessage("Sorry to hear that. Hail damage is covered by car body insurance."),
        HumanMessage("Which documents do I need for claim CLM-7731?"),
        AIMessage("Photos of the damage, the policy number and an assessor's report."),
    ]
    later = [
        message
        for k in range(2, 60)
        for message in (HumanMessage(f"Follow-up {k}: and what about the waiting period?"), AIMessage(f"Answer {k}."))
    ]
    history = opening + later
    summary = ""
    for start in range(0, len(history), 8):  # folded a batch at a time, as the graph does
        summary = offline_summary(summary, history[start : start + 8], "en")
    assert len(summary) <= SUMMARY_MAX_CHARS
    assert "hail" in summary and "CLM-7731" in summary and "car body policy" in summary
    assert "Follow-up 59" in summary


async def test_fold_summary_without_a_model_is_offline() -> None:
    dropped = turns(2)
    assert await fold_summary("- قبلی", dropped, "fa", None) == offline_summary("- قبلی", dropped, "fa")


async def test_fold_summary_with_a_model_uses_its_reply() -> None:
    model = FakeListChatModel(responses=["کاربر درباره فرانشیز بیمه بدنه پرسید."])
    assert await fold_summary("", turns(2), "fa", model) == "کاربر درباره فرانشیز بیمه بدنه پرسید."


async def test_failing_or_empty_summariser_keeps_the_previous_summary() -> None:
    assert await fold_summary("- قبلی", turns(2), "fa", ScriptedChatModel(mode="fail")) == "- قبلی"
    assert await fold_summary("- قبلی", turns(2), "fa", FakeListChatModel(responses=["  "])) == "- قبلی"


async def test_sixty_turn_thread_folds_each_dropped_turn_once() -> None:
    """Drive the window and the fold as `generate` does, turn by turn, and audit the folds."""
    counter = token_counter_for("offline")
    rng = random.Random(7)
    history: list[BaseMessage] = []
    summary, upto, folded_ranges = "", 0, []
    for turn in range(60):
        question = HumanMessage(f"پرسش {turn}: {rng.choice(PERSIAN_PARAGRAPHS)}")
        inputs = WindowInputs(
            system_prompt="شما دستیار بیمه هستید.",
            profile={},
            facts=[],
            summary=summary,
            chunks=[],
            history=list(history),
            question=question,
        )
        window = build_window(inputs, budget=2500, counter=counter)
        start, end = messages_to_fold(len(history), upto, window.first_kept)
        if end > start:
            summary = await fold_summary(summary, history[start:end], "fa", None)
            folded_ranges.append((start, end))
            upto = end
        history += [question, AIMessage(rng.choice(PERSIAN_PARAGRAPHS))]
    assert folded_ranges, "a 60-turn thread must overflow a 2500-token window"
    # Each fold starts where the previous ended: no message is read twice, none skipped.
    assert folded_ranges[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(folded_ranges))
    last_folded_question = str(history[upto - 2].content)[:20]
    assert last_folded_question in summary


async def test_a_hanging_summariser_keeps_the_previous_summary_within_the_timeout() -> None:
    # The model never answers: only the 0.2 s timeout ends the fold (wait_for bounds a hang
    # of the test, were the timeout ignored).
    hung = fold_summary("old summary", turns(4), "en", ScriptedChatModel(mode="hang"), timeout=0.2)
    folded = await asyncio.wait_for(hung, 30)
    assert folded == "old summary"


async def test_a_model_summary_pins_its_first_fold_as_the_opening_and_folds_only_the_tail() -> None:
    model = ScriptedChatModel(mode="summary-records", prompts=[])
    summary = ""
    for k in range(0, 40, 4):
        summary = await fold_summary(summary, turns(4, offset=k), "en", model)
    assert len(model.prompts) == 10
    # The first fold was asked for the opening, every later one gets it as fixed context.
    assert "how this conversation opened" in model.prompts[0]
    for prompt in model.prompts[1:]:
        assert prompt.startswith("How the conversation opened (kept as it is; do not repeat it):\n- summary 1\n")
    assert summary == f"- summary 1\n{OPENING_END}\n- summary 10"
    assert split_opening(summary) == ("- summary 1", "- summary 10")


async def test_long_model_summaries_stay_bounded_and_keep_the_opening() -> None:
    opening = "The customer's car was damaged by hail; claim CLM-7731, car body policy."
    replies = [opening] + [f"- point {k}: " + "details " * 120 for k in range(6)]
    model = FakeListChatModel(responses=replies)
    summary = ""
    for k in range(0, 28, 4):
        summary = await fold_summary(summary, turns(4, offset=k), "en", model)
        assert len(summary) <= SUMMARY_MAX_CHARS
    assert summary.startswith(opening + "\n" + OPENING_END + "\n")
    assert "point 5" in summary  # the newest fold's text, cut from its start


async def test_an_over_long_first_model_summary_keeps_its_beginning_as_the_opening() -> None:
    model = FakeListChatModel(responses=["Claim CLM-7731 about hail damage. " + "More. " * 400])
    summary = await fold_summary("", turns(2), "en", model)
    assert summary.startswith("Claim CLM-7731") and len(summary) <= OPENING_MAX_CHARS


@pytest.mark.parametrize(
    "reply",
    [
        "Error: upstream request timed out",
        "An error occurred while processing your request.",
        '{"error": {"message": "The server had an error", "type": "server_error"}}',
        "<!DOCTYPE html><html><body>502 Bad Gateway</body></html>",
        "Internal Server Error",
        "Rate limit reached for requests",
        "upstream connect error or disconnect/reset before headers",
        "Traceback (most recent call last):\n  File ...",
        "status: 503 service unavailable",
        "x" * (4 * SUMMARY_MAX_CHARS + 1),
    ],
)
async def test_a_reply_that_looks_like_an_error_or_is_far_too_long_is_discarded_and_retried_later(reply: str) -> None:
    previous = "The customer's car was damaged by hail; claim CLM-7731."
    model = FakeListChatModel(responses=[reply, "- later: they asked about the deductible"])
    # Discarded: the previous summary stays, so the caller keeps the messages to fold again.
    assert await fold_summary(previous, turns(2), "en", model) == previous
    again = await fold_summary(previous, turns(2), "en", model)
    assert again.startswith(previous) and "deductible" in again


async def test_a_summary_that_mentions_an_error_is_still_a_summary() -> None:
    reply = "The customer reported an error in their policy's address and asked to correct it."
    model = FakeListChatModel(responses=[reply])
    assert await fold_summary("", turns(2), "en", model) == reply
