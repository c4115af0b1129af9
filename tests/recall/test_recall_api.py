"""Thread recall through the API: a late question gets the early turns it needs, and only those of its thread."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langchain_core.messages import BaseMessage

from tests.fixtures.app import running_app
from tests.recall.conversation import ask, long_thread

DETAILS = {
    "en": (
        "The other driver's plate was 52K913 and his insurer was Asia Insurance.",
        "What was the other driver's plate number?",
        "52K913",
    ),
    "fa": (
        "پلاک ماشین طرف مقابل ۴۷ط۸۲۱ بود و بیمه‌اش آسیا بود.",
        "پلاک ماشین طرف مقابل چه بود؟",
        "47ط821",
    ),
}


@pytest.mark.parametrize("language", ["en", "fa"])
async def test_a_detail_from_turn_3_of_300_is_in_the_model_input_and_the_record(
    isolated_database_url: str, language: str
) -> None:
    windows: list[Sequence[BaseMessage]] = []
    detail, question, needle = DETAILS[language]
    async with running_app(isolated_database_url, agent_overrides={"window_observer": windows.append}) as client:
        ids = await long_thread(client, "long", language, 300, {3: detail})
        windows.clear()
        record = await ask(client, "long", question, language)
    given = "\n".join(str(m.content) for m in windows[-1])
    assert needle in given or detail in given
    recalled = record["context"]["recalled"]
    assert {"id": ids[3], "role": "user", "content": detail} in recalled
    assert ids[3] not in [m["id"] for m in record["context"]["messages"]]  # recalled, not in the window
