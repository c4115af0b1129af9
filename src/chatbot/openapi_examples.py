"""Request and response examples of the OpenAPI document, in English and in Persian.

The SSE examples are framed from the same `end` objects as the JSON examples, with the
ids computed by the contract's rule (`<run_id>:<offset>`, offset in code points), so the
two can never disagree.
"""

from __future__ import annotations

import json
from typing import TypedDict

from pydantic import JsonValue

from chatbot.ids import RunId, ThreadId
from chatbot.responses import HandoffContext, MessageRef, RoleMessage, RunEnd

RUN_ID_EN = RunId("6f1c2a9e-3b4d-4f5a-9c8e-1d2b3a4c5e6f")
RUN_ID_FA = RunId("0b7e5d4c-9a8f-4e3d-8c2b-7a6f5e4d3c2b")
THREAD_EN = ThreadId("session-4821")
THREAD_FA = ThreadId("session-7310")

_QUESTION_EN = "Does my car insurance cover a broken windscreen?"
_QUESTION_FA = "آیا بیمه بدنه خودروی من شکستگی شیشه را پوشش می‌دهد؟"
_ANSWER_EN = "Yes. Glass breakage is covered by the comprehensive car policy, with no deductible for the first claim."
_ANSWER_FA = "بله. شکستگی شیشه در بیمه بدنه خودرو پوشش داده می‌شود و برای اولین خسارت فرانشیز ندارد."


class Example(TypedDict):
    """One named example of an OpenAPI media type."""

    summary: str
    value: JsonValue


def _named(
    english: JsonValue, persian: JsonValue, *, en: str = "English", fa: str = "Persian (fa-IR)"
) -> dict[str, Example]:
    return {"english": {"summary": en, "value": english}, "persian": {"summary": fa, "value": persian}}


RUN_REQUEST = _named({"message": {"content": _QUESTION_EN}}, {"message": {"content": _QUESTION_FA}})

FEEDBACK_REQUEST = _named(
    {"score": "down", "comment": "The answer quoted last year's deductible."},
    {"score": "up", "comment": "پاسخ دقیق و سریع بود."},
)


def _answered(run_id: RunId, thread_id: ThreadId, message_id: str, answer: str, citation: str) -> RunEnd:
    message = MessageRef(id=message_id, content=answer)
    return RunEnd(run_id=run_id, thread_id=thread_id, status="answered", message=message, citations=[citation])


END_EN = _answered(RUN_ID_EN, THREAD_EN, "a1e3c5d7-0000-4000-8000-000000000002", _ANSWER_EN, "car-policy-en:3")
END_FA = _answered(RUN_ID_FA, THREAD_FA, "b2f4d6e8-0000-4000-8000-000000000002", _ANSWER_FA, "car-policy-fa:3")
END_ESCALATE_FA = RunEnd(
    run_id="4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a",
    thread_id=THREAD_FA,
    status="escalate",
    message=MessageRef(
        id="c3a5b7d9-0000-4000-8000-000000000004",
        content="درخواست شما را به یکی از همکاران پشتیبانی منتقل می‌کنم.",
    ),
    citations=[],
    handoff_context=HandoffContext(
        reason="user_requested_human",
        conversation_summary="کاربر درباره پوشش شکستگی شیشه در بیمه بدنه پرسید و سپس خواست با کارشناس صحبت کند.",
        user_profile={"language": "fa", "products": ["car"]},
        recent_messages=[
            RoleMessage(role="user", content=_QUESTION_FA),
            RoleMessage(role="assistant", content=_ANSWER_FA),
            RoleMessage(role="user", content="می‌خواهم با یک کارشناس صحبت کنم."),
        ],
    ),
)

RUN_END = {
    **_named(END_EN.model_dump(), END_FA.model_dump()),
    "escalate": Example(summary="Persian, handed over to a person", value=END_ESCALATE_FA.model_dump()),
}


def _frame(run_id: RunId, offset: int, event: str, data: JsonValue) -> str:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"id: {run_id}:{offset}\nevent: {event}\ndata: {payload}\n\n"


def sse_example(end: RunEnd, *, delivered: int = 0, progress: bool = True) -> str:
    """Return the event stream of a run ending in `end`, from answer offset `delivered` on.

    A fresh stream (`delivered` 0, `progress`) is what `POST …/runs` sends: tokens word by
    word. A rejoin gets the rest of the answer past `delivered` as one token, as a replay does.
    """
    run_id, answer = end.run_id, end.message.content
    parts = [_frame(run_id, delivered, "metadata", {"run_id": run_id, "thread_id": end.thread_id})]
    if progress:
        parts.append(_frame(run_id, 0, "progress", {"stage": "retrieval", "status": "started"}))
        parts.append(_frame(run_id, 0, "progress", {"stage": "retrieval", "chunks": 3}))
        parts.append(": keep-alive\n\n")
    if delivered:
        parts.append(_frame(run_id, len(answer), "token", {"content": answer[delivered:]}))
    else:
        offset = 0
        for word in answer.split(" "):
            piece = word if offset + len(word) == len(answer) else word + " "
            offset += len(piece)
            parts.append(_frame(run_id, offset, "token", {"content": piece}))
    parts.append(_frame(run_id, len(answer), "end", end.model_dump()))
    return "".join(parts)


RUN_STREAM = _named(sse_example(END_EN), sse_example(END_FA))
REJOIN_OFFSET_EN, REJOIN_OFFSET_FA = 16, 12
REJOIN_STREAM = _named(
    sse_example(END_EN, delivered=REJOIN_OFFSET_EN, progress=False),
    sse_example(END_FA, delivered=REJOIN_OFFSET_FA, progress=False),
    en=f"English, rejoined with `Last-Event-ID: {RUN_ID_EN}:{REJOIN_OFFSET_EN}`",
    fa=f"Persian, rejoined with `Last-Event-ID: {RUN_ID_FA}:{REJOIN_OFFSET_FA}`",
)


def _message(id_: str, role: str, content: str, at: str, run_id: RunId, citations: list[str]) -> JsonValue:
    return {"id": id_, "role": role, "content": content, "created_at": at, "run_id": run_id, "citations": [*citations]}


def _page(end: RunEnd, question: str, prefix: str) -> JsonValue:
    return {
        "messages": [
            _message(
                f"{prefix}-0000-4000-8000-000000000001", "user", question, "2026-03-02T09:15:04.118Z", end.run_id, []
            ),
            _message(
                end.message.id,
                "assistant",
                end.message.content,
                "2026-03-02T09:15:05.362Z",
                end.run_id,
                list(end.citations),
            ),
        ],
        "has_more": True,
        "next_before": f"{prefix}-0000-4000-8000-000000000001",
    }


MESSAGES_PAGE = _named(_page(END_EN, _QUESTION_EN, "a1e3c5d7"), _page(END_FA, _QUESTION_FA, "b2f4d6e8"))


def _record(end: RunEnd, question: str, prefix: str, chunk_text: str, language: str) -> JsonValue:
    return {
        "run_id": end.run_id,
        "thread_id": end.thread_id,
        "status": end.status,
        "created_at": "2026-03-02T09:15:04.118Z",
        "model": "offline",
        "input": {"id": f"{prefix}-0000-4000-8000-000000000001", "content": question},
        "answer": end.message.model_dump(),
        "citations": list(end.citations),
        "context": {
            "system_prompt_sha256": "9f2c4e0a7b1d3f5e6a8c0b2d4f6e8a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d1f",
            "summary": "",
            "profile": {"language": language, "products": ["car"]},
            "facts": [],
            "messages": [{"id": f"{prefix}-0000-4000-8000-000000000001", "role": "user", "content": question}],
            "retrieved": [
                {
                    "chunk_id": end.citations[0],
                    "document_id": end.citations[0].split(":")[0],
                    "version": 2,
                    "text": chunk_text,
                    "pages": [4],
                },
            ],
        },
    }


RUN_RECORD = _named(
    _record(
        END_EN,
        _QUESTION_EN,
        "a1e3c5d7",
        "Glass breakage (windscreen, side and rear windows) is covered with no deductible for the first claim.",
        "en",
    ),
    _record(
        END_FA,
        _QUESTION_FA,
        "b2f4d6e8",
        "شکستگی شیشه (جلو، بغل و عقب) تحت پوشش است و برای اولین خسارت فرانشیز ندارد.",
        "fa",
    ),
)

USER_MEMORY = _named(
    {
        "user_id": "u-1042",
        "profile": {"language": "en", "products": ["car", "home"]},
        "facts": [
            {
                "id": "f-1",
                "text": "My car is a 2019 Toyota Corolla.",
                "category": "vehicle",
                "updated_at": "2026-03-02T09:15:06.004512Z",
                "source": {"thread_id": "t-77", "run_id": "0b7f5c1e-4a8e-4f7e-9d55-3c2a9f0e6b21"},
            },
        ],
    },
    {
        "user_id": "u-2087",
        "profile": {"language": "fa", "products": ["car"]},
        "facts": [
            {
                "id": "f-1",
                "text": "خودروی من پژو ۲۰۶ مدل ۱۳۹۸ است.",
                "category": "vehicle",
                "updated_at": "2026-03-02T09:15:06.004512Z",
                "source": None,
            },
        ],
    },
)

ERASURE_REPORT: dict[str, Example] = {
    "erased": {
        "summary": "A user with two threads",
        "value": {"threads_deleted": 2, "memory_items_deleted": 4, "feedback_deleted": 1},
    },
}

HEALTHZ: dict[str, Example] = {"alive": {"summary": "The process is alive", "value": {"status": "ok"}}}
READYZ: dict[str, Example] = {
    "ready": {"summary": "Postgres answers and the schema is migrated", "value": {"status": "ready"}}
}
NOT_READY = {
    "type": "about:blank",
    "title": "Not Ready",
    "status": 503,
    "detail": "database schema is not migrated (missing table run_feedback): run `chatbot migrate`",
}
METRICS = (
    "# HELP chatbot_runs_total Runs by terminal status.\n"
    "# TYPE chatbot_runs_total counter\n"
    'chatbot_runs_total{status="answered"} 1042.0\n'
    'chatbot_runs_total{status="error"} 3.0\n'
)
