"""The offline responder: a deterministic answerer that needs no network and no weights.

It is a real part of the product (demo, CI, degraded mode): it answers from the retrieved
section that answers the question (models/_sections.py ranks them, the thread's earlier
questions included), quoting it as written with its citation, framed in the question's
language; tells the user what it was given about them when asked; asks a clarifying
question when nothing relevant was found or the question is too vague; and escalates when
the user asks for a person or keeps being unanswerable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import JsonValue

from chatbot.models._sections import rank_sections
from chatbot.models.reply import Reply
from chatbot.responses import QuotedChunk
from chatbot.text import looks_persian, normalize_persian

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
# Asking what is known about oneself: answered from the profile and facts, not the knowledge base.
_ABOUT_ME_EN = re.compile(
    r"\b(what|anything|tell me what)\b.{0,40}\b(know|remember|have|stored?|kept)\b.{0,30}\babout me\b"
    r"|\bwhat do you remember\b"
)
_ABOUT_ME_FA = re.compile(r"(درباره|در مورد|از) ?(من|خودم).{0,30}(می ?دانی|میدونی|میدانید|یادت|به خاطر|ذخیره|نگه)")
# Retrieved chunks the offline responder chooses its section from: more than a model's
# prompt holds, since it quotes one section and must find the one that answers (the graph
# keeps the best few of them: agent/nodes.py).
OFFLINE_CANDIDATES = 15
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


def asks_about_self(text: str) -> bool:
    """Return True when the message asks what is known or remembered about its writer."""
    folded = normalize_persian(text).lower()
    return bool(_ABOUT_ME_EN.search(folded) or _ABOUT_ME_FA.search(folded))


def answer_language(question: str, token_language: str) -> str:
    """Return the language to answer in: the question's own script, else the token's locale."""
    if looks_persian(question):
        return "fa"
    if any(c.isascii() and c.isalpha() for c in question):
        return "en"
    return token_language


def _pick_chunk(chunks: Sequence[QuotedChunk], language: str) -> QuotedChunk:
    # The chunks come ranked (`rank_candidates`): the first in the answer's language.
    for chunk in chunks:
        if chunk.language == language:
            return chunk
    return chunks[0]


# What makes a message lean on the one before it: an opening connective ("And for…", "What
# about…", "و …"), a word that points back ("it", "that", "همین"), "also" ("هم"), or the
# Persian "X چطور؟" ("what about X?"). Only such a message is searched a second time with
# the thread's previous question: a question that stands alone costs one search.
_LEANS_ON_THREAD = re.compile(
    r"^\s*(?:and|also|ok|so|what about|how about|then|و|پس|خب|همچنین)\b"
    r"|\b(?:it|its|that|this|these|those|them|they|same|too|also|either)\b"
    r"|(?:^|\s)(?:هم|همین|همان|آن|این|اون|این‌ها|آن‌ها)(?=\s|[؟?!.،,]|$)"
    r"|چطور\s*[؟?]?\s*$",
    re.IGNORECASE,
)


def leans_on_thread(question: str) -> bool:
    """Whether a message reads as a follow-up of the thread's previous question (see above)."""
    return bool(_LEANS_ON_THREAD.search(normalize_persian(question)))


def rank_candidates(
    question: str, chunks: Sequence[QuotedChunk], *, language: str, thread: Sequence[str] = ()
) -> list[QuotedChunk]:
    """Return retrieved chunks in the order the offline responder values them.

    Chunks in the answer's language first, each group best section first: the graph keeps
    the head of this list as the run's retrieved chunks, so the record, the window and the
    answer agree on what was found.
    """
    answer_in = answer_language(question, language)
    same = [chunk for chunk in chunks if chunk.language == answer_in]
    other = [chunk for chunk in chunks if chunk.language != answer_in]
    return rank_sections(question, same, thread=thread) + rank_sections(question, other, thread=thread)


def _about_self(texts: Mapping[str, str], profile: Mapping[str, JsonValue], facts: Sequence[str]) -> str:
    lines = [f"- {key}: {value}" for key, value in profile.items() if value not in (None, "", [], {})]
    lines += [f"- {fact}" for fact in facts]
    return texts["about_me"] + "\n" + "\n".join(lines) if lines else texts["nothing_about_me"]


_TEXTS = {
    "fa": {
        "answer": "بر اساس «{title}»{where}:\n{text}",
        "page": "، صفحهٔ {}",
        "pages": "، صفحه‌های {}–{}",
        "clarify": "متوجه نشدم دقیقاً درباره کدام بیمه یا چه موضوعی می‌پرسید. لطفاً سؤالتان را کمی بیشتر توضیح دهید "
        "(مثلاً نوع بیمه: شخص ثالث، بدنه، درمان تکمیلی، مسافرتی، منزل یا عمر).",
        "vague": "لطفاً سؤالتان را کامل‌تر بنویسید تا بتوانم دقیق پاسخ بدهم.",
        "human": "درخواست شما برای گفتگو با کارشناس ثبت شد. یکی از همکاران ما به‌زودی گفتگو را ادامه می‌دهد.",
        "stuck": "متأسفانه نتوانستم پاسخ سؤال شما را پیدا کنم. گفتگو را به یکی از کارشناسان ما می‌سپارم.",
        "noted": "حتماً، این را به خاطر می‌سپارم.",
        "private": "برای حفظ امنیت شما، کد ملی، اطلاعات کارت و حساب و اطلاعات پزشکی را نگه نمی‌داریم؛ "
        "لطفاً آن‌ها را در گفتگو ننویسید.",
        "about_me": "این‌ها را درباره شما می‌دانم:",
        "nothing_about_me": "هنوز چیزی درباره شما به خاطر نسپرده‌ام. اگر بخواهید، بگویید «به خاطر بسپار که …».",
    },
    "en": {
        "answer": "According to “{title}”{where}:\n{text}",
        "page": ", page {}",
        "pages": ", pages {}–{}",
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
        "about_me": "This is what I know about you:",
        "nothing_about_me": "I don't have anything remembered about you yet. "
        "Tell me “remember that …” if you'd like me to.",
    },
}


_PERSIAN_DIGITS = str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")


def _pages_note(pages: Sequence[int] | None, texts: Mapping[str, str]) -> str:
    """Return where in a PDF the quoted text is (", page 4", "، صفحهٔ ۴"), empty for a document without pages."""
    if not pages:
        return ""
    first, last = str(pages[0]), str(pages[-1])
    if texts is _TEXTS["fa"]:
        first, last = first.translate(_PERSIAN_DIGITS), last.translate(_PERSIAN_DIGITS)
    return texts["page"].format(first) if first == last else texts["pages"].format(first, last)


def offline_reply(
    question: str,
    chunks: Sequence[QuotedChunk],
    *,
    language: str,
    unanswered_streak: int,
    memory_request: MemoryRequest | None = None,
    profile: Mapping[str, JsonValue] | None = None,
    facts: Sequence[str] = (),
) -> Reply:
    """Decide the answer, status and citations for one user message.

    `language` is the token's; a question written in the other script is answered in its
    own. `memory_request` is what the memory rules made of the message (the graph runs
    them once and hands the same result to the memory writer). `chunks` come ranked by
    `rank_candidates` (the graph ranks them as it retrieves, the thread included);
    `profile` and `facts` are what memory gave this turn.
    """
    language = answer_language(question, language)
    texts = _TEXTS["fa" if language == "fa" else "en"]
    if wants_human(question):
        return Reply("escalate", texts["human"], escalation_reason="user_requested_human")
    # "Remember that …" is answered by acknowledging it; the memory writer stores it after
    # the answer (or, for personal data, the guard drops it and the user is told why).
    if memory_request == "refused":
        return Reply("answered", texts["private"])
    if memory_request == "noted":
        return Reply("answered", texts["noted"])
    if asks_about_self(question):
        return Reply("answered", _about_self(texts, profile or {}, facts))
    if chunks and not _is_vague(question):
        chunk = _pick_chunk(chunks, language)
        title = chunk.title or chunk.chunk_id
        where = _pages_note(chunk.pages, texts)
        content = texts["answer"].format(title=title, where=where, text=chunk.text.strip())
        return Reply("answered", content, [chunk.chunk_id])
    if unanswered_streak + 1 >= ESCALATE_AFTER_UNANSWERED:
        return Reply("escalate", texts["stuck"], escalation_reason="repeatedly_unanswerable")
    return Reply("clarifying", texts["vague"] if _is_vague(question) else texts["clarify"])


_TOKEN = re.compile(r"\S+\s*|\s+")


def split_tokens(content: str) -> list[str]:
    """Split an answer into word-sized deltas that concatenate back to it exactly."""
    return _TOKEN.findall(content)
