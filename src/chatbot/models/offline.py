"""The offline responder: a deterministic answerer that needs no network and no weights.

It is a real part of the product (demo, CI, degraded mode): it answers from the best
retrieved chunk, quoting it as written with its citation; asks a clarifying question when
nothing relevant was found or the question is too vague; and escalates when the user asks
for a person or keeps being unanswerable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from chatbot.models.reply import Reply
from chatbot.text import normalize_persian

# Asking for a person, in English and Persian (matched on normalised, lower-cased text).
_PERSON_EN = (
    r"(human|real person|person|someone|somebody|live agent|agent|operator|representative|"
    r"consultant|staff|specialist|expert)"
)
# (verb, person) pairs: a verb, then a person word later on the same line. Two searches, not
# one `verb.*person` regex: that one scanned to the end of the line from every verb, and
# "talk talk talk …" (8,000 characters, no person) cost 0.08 s.
_HUMAN_EN = (
    (re.compile(r"\b(talk|speak|chat|connect|transfer|put me through)\w*\b"), re.compile(rf"\b{_PERSON_EN}\b")),
    (
        re.compile(r"\b(want|need|get me|give me)\b"),
        re.compile(r"\b(human|real person|live agent|operator|representative)\b"),
    ),
)
_HUMAN_FA = re.compile(
    r"(کارشناس|اپراتور|اپرياتور|انسان|آدم واقعی|پشتیبان|مشاور|نماینده|با یک نفر|با یکی|تماس انسانی|مسئول)"
)
_TALK_FA = re.compile(r"(صحبت|حرف|وصل|ارتباط|تماس|می ?خواهم|میخوام|لطفا)")
# "Unanswerable" turns in a row after which the offline responder hands the user over.
ESCALATE_AFTER_UNANSWERED = 3
_MIN_QUESTION_CHARS = 6


MemoryRequest = Literal["noted", "refused"]
"""What the user's "remember …" asked of memory this turn: noted, or refused as personal data."""


def wants_human(text: str) -> bool:
    """Return True when the message asks to talk to a person."""
    folded = normalize_persian(text).lower()
    if any(_then_on_one_line(folded, verb, person) for verb, person in _HUMAN_EN):
        return True
    return bool(_HUMAN_FA.search(folded) and _TALK_FA.search(folded))


def _then_on_one_line(text: str, first: re.Pattern[str], then: re.Pattern[str]) -> bool:
    """Return True when `then` matches after a match of `first`, before the line ends (as `first.*then`)."""
    pos = 0
    while (found := first.search(text, pos)) is not None:
        # The leftmost `first` of a line ends first, so it alone decides the line.
        line_end = text.find("\n", found.end())
        line_end = len(text) if line_end < 0 else line_end
        if then.search(text, found.end(), line_end):
            return True
        pos = line_end + 1
    return False


def _is_vague(text: str) -> bool:
    words = re.findall(r"\w+", normalize_persian(text))
    return len("".join(words)) < _MIN_QUESTION_CHARS or len(words) < 2


def _pick_chunk(chunks: Sequence[Mapping[str, Any]], language: str) -> Mapping[str, Any]:
    # Prefer the best chunk in the caller's language when the knowledge base has one.
    for chunk in chunks:
        if chunk.get("language") == language:
            return chunk
    return chunks[0]


_TEXTS = {
    "fa": {
        "answer": "بر اساس «{title}»:\n{text}",
        "clarify": "متوجه نشدم دقیقاً درباره کدام بیمه یا چه موضوعی می‌پرسید. لطفاً سؤالتان را کمی بیشتر توضیح دهید "
        "(مثلاً نوع بیمه: شخص ثالث، بدنه، درمان تکمیلی، مسافرتی، منزل یا عمر).",
        "vague": "لطفاً سؤالتان را کامل‌تر بنویسید تا بتوانم دقیق پاسخ بدهم.",
        "human": "درخواست شما برای گفتگو با کارشناس ثبت شد. یکی از همکاران ما به‌زودی گفتگو را ادامه می‌دهد.",
        "stuck": "متأسفانه نتوانستم پاسخ سؤال شما را پیدا کنم. گفتگو را به یکی از کارشناسان ما می‌سپارم.",
        "noted": "حتماً، این را به خاطر می‌سپارم.",
        "private": "برای حفظ امنیت شما، کد ملی، اطلاعات کارت و حساب و اطلاعات پزشکی را نگه نمی‌داریم؛ "
        "لطفاً آن‌ها را در گفتگو ننویسید.",
    },
    "en": {
        "answer": "According to “{title}”:\n{text}",
        "clarify": "I'm not sure which insurance or topic you mean. Could you tell me a bit more "
        "(for example: third-party liability, car body, supplementary health, travel, home or life)?",
        "vague": "Could you write your question in a little more detail so I can answer it precisely?",
        "human": "I've asked a member of our support team to take over this conversation. "
        "They will be with you shortly.",
        "stuck": "I'm sorry, I couldn't find an answer to your question. I'm handing this conversation to one of our "
        "specialists.",
        "noted": "Noted: I'll remember that.",
        "private": "For your security we don't keep national IDs, card or account details, or health information; "
        "please don't share them here.",
    },
}


def offline_reply(
    question: str,
    chunks: Sequence[Mapping[str, Any]],
    *,
    language: str,
    unanswered_streak: int,
    memory_request: MemoryRequest | None = None,
) -> Reply:
    """Decide the answer, status and citations for one user message.

    `memory_request` is what the memory rules made of the message (the graph runs them
    once and hands the same result to the memory writer).
    """
    texts = _TEXTS["fa" if language == "fa" else "en"]
    if wants_human(question):
        return Reply("escalate", texts["human"], escalation_reason="user_requested_human")
    # "Remember that …" is answered by acknowledging it; the memory writer stores it after
    # the answer (or, for personal data, the guard drops it and the user is told why).
    if memory_request == "refused":
        return Reply("answered", texts["private"])
    if memory_request == "noted":
        return Reply("answered", texts["noted"])
    if chunks and not _is_vague(question):
        chunk = _pick_chunk(chunks, language)
        content = texts["answer"].format(title=chunk.get("title") or chunk["chunk_id"], text=chunk["text"].strip())
        return Reply("answered", content, [str(chunk["chunk_id"])])
    if unanswered_streak + 1 >= ESCALATE_AFTER_UNANSWERED:
        return Reply("escalate", texts["stuck"], escalation_reason="repeatedly_unanswerable")
    return Reply("clarifying", texts["vague"] if _is_vague(question) else texts["clarify"])


_TOKEN = re.compile(r"\S+\s*|\s+")


def split_tokens(content: str) -> list[str]:
    """Split an answer into word-sized deltas that concatenate back to it exactly."""
    return _TOKEN.findall(content)
