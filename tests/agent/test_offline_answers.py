"""The offline responder as a newcomer meets it: the section that answers, in the question's
language, on the thread's topic, and what it was given about the user."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.caller import CallerContext
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.memory.items import StoredItem
from chatbot.memory.read import Remembered
from chatbot.models.offline import offline_reply, rank_candidates
from chatbot.models.reply import Reply
from chatbot.responses import QuotedChunk
from chatbot.retrieval.chunking import split_document

DEMO_FA = Path(__file__).resolve().parents[2] / "knowledge" / "demo" / "fa"


def chunk(chunk_id: str, title: str, text: str, language: str = "en") -> QuotedChunk:
    return QuotedChunk(chunk_id=chunk_id, title=title, text=text, language=language)


CAR_BODY = "Car body insurance"
CANCELLING = "Cancelling a policy and refunds"
# As retrieval ranks them for "How do I cancel my car body policy?": the document that
# matches most words first, the section that answers further down.
CANCEL_CANDIDATES = [
    chunk(
        "car-body#1",
        f"{CAR_BODY} › Before the policy is issued",
        "Before the car body policy is issued, an inspector photographs the car.",
    ),
    chunk(
        "cancel#4",
        f"{CANCELLING} › Special cases",
        "Car body cancellation when the car is sold: the new owner can take over the policy instead.",
    ),
    chunk("car-body#2", f"{CAR_BODY} › Basic cover", "Car body cover pays for collision, fire and theft."),
    chunk(
        "cancel#3",
        f"{CANCELLING} › How to cancel",
        "Submit the cancellation request in the app or at a "
        "branch, with your national ID card. Refunds are paid within 7 working days.",
    ),
]
TRAVEL_FA = chunk(
    "fa/safar#1",
    "بیمه مسافرتی › هزینه‌های پزشکی در خارج از کشور",
    "- طرح استاندارد: هزینه‌های درمان و بیمارستان اضطراری تا ۵۰٬۰۰۰ یورو\n- دندانپزشکی اضطراری تا ۵۰۰ یورو",
    "fa",
)
HEALTH_FA = chunk(
    "fa/takmili#1",
    "بیمه درمان تکمیلی › سقف تعهدات سالانه هر نفر",
    "- بستری و جراحی: تا ۳۰۰ میلیون تومان\n- دندانپزشکی: تا ۱۰ میلیون تومان",
    "fa",
)


def answer(question: str, chunks: list[QuotedChunk], *, language: str, thread: Sequence[str] = ()) -> Reply:
    """The offline responder as the graph runs it: candidates ranked, then the answer."""
    ranked = rank_candidates(question, chunks, language=language, thread=thread)
    return offline_reply(question, ranked, language=language, unanswered_streak=0)


def test_the_section_that_answers_is_quoted_not_the_first_retrieved() -> None:
    reply = answer("How do I cancel my car body policy?", CANCEL_CANDIDATES, language="en")
    assert reply.status == "answered"
    assert reply.citations == ["cancel#3"]
    assert reply.content.startswith(f"According to “{CANCELLING} › How to cancel”:")


def test_a_persian_question_under_an_english_token_gets_a_persian_frame() -> None:
    reply = answer("هزینه دندانپزشکی در سفر چقدر است؟", [TRAVEL_FA], language="en")
    assert reply.content.startswith("بر اساس «بیمه مسافرتی")
    clarify = offline_reply("بیمه فضاپیما چطور است؟", [], language="en", unanswered_streak=0)
    assert clarify.status == "clarifying" and clarify.content.startswith("متوجه نشدم")
    english = offline_reply("What does travel insurance pay?", [], language="fa", unanswered_streak=0)
    assert english.content.startswith("I'm not sure which insurance")


def test_a_follow_up_stays_on_the_threads_topic() -> None:
    candidates = [HEALTH_FA, TRAVEL_FA]  # the follow-up's own words find health insurance first
    alone = answer("و درمان دندان چطور؟", candidates, language="fa")
    assert alone.citations == ["fa/takmili#1"]
    followed = answer(
        "و درمان دندان چطور؟",
        candidates,
        language="fa",
        thread=["بیمه مسافرتی هزینه بیمارستان در خارج از کشور را می‌دهد؟"],
    )
    assert followed.citations == ["fa/safar#1"]


def _demo_sections(name: str, title: str) -> list[QuotedChunk]:
    text = (DEMO_FA / name).read_text(encoding="utf-8")
    return [chunk(c.chunk_id, c.title, c.text, "fa") for c in split_document(f"fa/{name}", title, text)]


def test_a_threads_word_in_another_documents_heading_does_not_pull_the_follow_up_there() -> None:
    # As retrieval gave them: travel first ("پوشش", "دهد" and "دندانپزشکی" are in its text),
    # and its medical section is headed "هزینه‌ها", a word of the thread's question.
    candidates = _demo_sections("safar.md", "بیمه مسافرتی")[:2] + _demo_sections("takmili.md", "بیمه درمان تکمیلی")
    reply = answer(
        "دندانپزشکی را هم پوشش می‌دهد؟",
        candidates,
        language="fa",
        thread=["بیمه درمان تکمیلی هزینه بستری را می‌دهد؟"],
    )
    assert reply.content.startswith("بر اساس «بیمه درمان تکمیلی › سقف تعهدات سالانه هر نفر»")


def test_what_do_you_know_about_me_is_answered_from_the_profile_and_facts() -> None:
    for question, language, opening in [
        ("What do you know about me?", "en", "This is what I know about you:"),
        ("درباره من چه می‌دانی؟", "fa", "این‌ها را درباره شما می‌دانم:"),
    ]:
        reply = offline_reply(
            question,
            CANCEL_CANDIDATES,
            language=language,
            unanswered_streak=0,
            profile={"city": "Shiraz", "vehicle": "Peugeot 206"},
            facts=["I have two children"],
        )
        assert reply.status == "answered" and reply.citations == []
        assert reply.content.splitlines() == [
            opening,
            "- city: Shiraz",
            "- vehicle: Peugeot 206",
            "- I have two children",
        ]
    nothing = offline_reply("What do you remember about me?", [], language="en", unanswered_streak=0)
    assert nothing.status == "answered" and nothing.content.startswith("I don't have anything remembered about you")


async def _graph_turns(messages: Sequence[str], deps: AgentDeps) -> dict[str, Any]:
    graph = build_graph(deps).compile(checkpointer=InMemorySaver())
    context = Context(
        tenant_id=TenantId("acme"), user_id=UserId("u1"), locale="en-US", run_id=RunId("r1"), thread_id=ThreadId("t1")
    )
    state: dict[str, Any] = {}
    for number, text in enumerate(messages):
        message = HumanMessage(text, id=f"q{number}")
        context = Context(
            tenant_id=TenantId("acme"),
            user_id=UserId("u1"),
            locale="en-US",
            run_id=RunId(f"r{number}"),
            thread_id=ThreadId("t1"),
        )
        state = await graph.ainvoke(
            {"messages": [message], "turn": [message]}, {"configurable": {"thread_id": "t1"}}, context=context
        )
    return state


async def test_the_graph_gives_the_offline_responder_the_thread_and_the_users_memory() -> None:
    searched: list[str] = []

    async def retrieve(_: CallerContext, query: str) -> list[QuotedChunk]:
        searched.append(query)
        # The follow-up alone finds health insurance; with the question before it, travel too.
        found = [HEALTH_FA, TRAVEL_FA] if "مسافرتی" in query else [HEALTH_FA]
        return found

    now = datetime.now(UTC)

    async def remembered(_tenant: str, _user: str) -> Remembered:
        return Remembered({"city": "Shiraz"}, [StoredItem("f1", {"text": "I drive a Peugeot 206"}, now, now)])

    deps = AgentDeps(retriever=retrieve, memory_reader=remembered)
    state = await _graph_turns(["بیمه مسافرتی هزینه بیمارستان در خارج از کشور را می‌دهد؟", "و درمان دندان چطور؟"], deps)
    assert state["outcome"]["citations"] == ["fa/safar#1"]
    assert searched[-2:] == [
        "و درمان دندان چطور؟",
        "بیمه مسافرتی هزینه بیمارستان در خارج از کشور را می‌دهد؟ و درمان دندان چطور؟",
    ]
    state = await _graph_turns(["What do you know about me?"], deps)
    assert state["messages"][-1].content.splitlines() == [
        "This is what I know about you:",
        "- city: Shiraz",
        "- I drive a Peugeot 206",
    ]


def test_a_quote_from_a_pdf_says_its_page() -> None:
    def quoted(pages: list[int] | None) -> QuotedChunk:
        return QuotedChunk(
            chunk_id="w.pdf#1", title="Wording › Glass", text="Glass is covered.", language="en", pages=pages
        )

    def answer(question: str, pages: list[int] | None, language: str = "en") -> str:
        return offline_reply(question, [quoted(pages)], language=language, unanswered_streak=0).content

    assert answer("Is glass covered?", [4]).startswith("According to “Wording › Glass”, page 4:\n")
    assert answer("Is glass covered?", [4, 5]).startswith("According to “Wording › Glass”, pages 4–5:\n")
    assert answer("Is glass covered?", None).startswith("According to “Wording › Glass”:\n")
    assert answer("آیا شیشه پوشش دارد؟", [12], "fa").startswith("بر اساس «Wording › Glass»، صفحهٔ ۱۲:\n")
