"""Long threads for the recall tests: filler turns around one detail, sent through the API."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fixtures.messages import send_for_answer
from tests.fixtures.tokens import auth

FILLER = {
    "en": [
        "How long does a claim usually take to be reviewed?",
        "Thanks, that helps a lot.",
        "Can I pay my premium in instalments?",
        "What is the waiting period for supplementary health cover?",
        "Is hail damage covered by the car body policy?",
        "Good morning! Quick question about my policy renewal.",
        "Do I need a police report for a small scratch?",
        "Which documents should I keep after an accident?",
    ],
    "fa": [
        "بررسی پرونده خسارت معمولا چقدر طول می‌کشد؟",
        "ممنون، خیلی کمک کرد.",
        "می‌توانم حق بیمه را قسطی پرداخت کنم؟",
        "دوره انتظار بیمه تکمیلی درمان چقدر است؟",
        "آیا خسارت تگرگ در بیمه بدنه پوشش دارد؟",
        "صبح بخیر! سوالی درباره تمدید بیمه‌نامه داشتم.",
        "برای یک خط و خش کوچک گزارش پلیس لازم است؟",
        "بعد از تصادف چه مدارکی را نگه دارم؟",
    ],
}
LOCALES = {"en": "en-US", "fa": "fa-IR"}


async def long_thread(
    client: httpx.AsyncClient, thread: str, language: str, turns: int, details: dict[int, str], **token: Any
) -> dict[int, str]:
    """Send `turns` messages to the thread, `details[n]` as turn n (from 1), filler otherwise.

    Returns the message id of each detail turn, read from its run's record.
    """
    ids: dict[int, str] = {}
    token = {"locale": LOCALES[language], **token}
    for turn in range(1, turns + 1):
        filler = FILLER[language][turn % len(FILLER[language])]
        end = await send_for_answer(client, thread, details.get(turn, filler), **token)
        if turn in details:
            record = await client.get(f"/v1/threads/{thread}/runs/{end['run_id']}", headers=auth(**token))
            ids[turn] = record.json()["input"]["id"]
    return ids


async def ask(client: httpx.AsyncClient, thread: str, question: str, language: str, **token: Any) -> dict[str, Any]:
    """Ask one question; return its run record."""
    token = {"locale": LOCALES[language], **token}
    end = await send_for_answer(client, thread, question, **token)
    response = await client.get(f"/v1/threads/{thread}/runs/{end['run_id']}", headers=auth(**token))
    assert response.status_code == 200, response.text
    return dict(response.json())
