"""Recalled turns replayed: `chatbot replay` prints them, `chatbot eval --from-feedback` gives them again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import pytest
from langchain_core.messages import BaseMessage

from chatbot.cli.replay import record_sections
from chatbot.config import Settings
from chatbot.evaluation.candidates import load_candidate
from chatbot.evaluation.dry_run import run_case
from chatbot.evaluation.replayed import rated_cases
from chatbot.ids import TenantId, ThreadId
from chatbot.threads.record import read_run_record
from tests.fixtures.app import running_app, services_of
from tests.fixtures.provider_double import Behaviour, ProviderDouble
from tests.fixtures.tokens import auth
from tests.recall.conversation import ask, long_thread
from tests.recall.test_recall_scope import SMALL

MODEL = "openai:gpt-4o-mini"
DETAIL = "The other driver's plate was 52K913."


async def test_replay_and_eval_give_the_recalled_turns_as_the_model_got_them(
    isolated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows: list[Sequence[BaseMessage]] = []
    async with running_app(
        isolated_database_url, context_tokens=SMALL, agent_overrides={"window_observer": windows.append}
    ) as client:
        ids = await long_thread(client, "replayed", "en", 30, {3: DETAIL})
        record = await ask(client, "replayed", "What was the other driver's plate?", "en")
        assert {"id": ids[3], "role": "user", "content": DETAIL} in record["context"]["recalled"]
        rated = await client.post(
            f"/v1/threads/replayed/runs/{record['run_id']}/feedback",
            json={"score": "down"},
            headers=auth(locale="en-US"),
        )
        assert rated.status_code == 204
        services = services_of(client)
        resolved = await read_run_record(
            services.pool, services.locks, ThreadId("replayed"), record["run_id"], TenantId("acme")
        )
        assert resolved is not None
        # `chatbot replay`: the recalled turns have a section, and the system message rebuilt is the one sent.
        sections = dict((title, lines) for title, lines in record_sections(resolved, system_message=True))
        recalled = next(lines for title, lines in sections.items() if title.startswith("Recalled ("))
        assert any(DETAIL in line and ids[3] in line for line in recalled)
        assert sections["System message as sent"] == [str(windows[-1][0].content)]
        cases = await rated_cases(
            services.pool,
            services.locks,
            tenant_id=TenantId("acme"),
            since=datetime.now(UTC) - timedelta(hours=1),
        )
    # `chatbot eval --from-feedback`: the candidate gets the same system message, recalled turns and all.
    (case,) = cases
    assert case.window is not None and [t.message_id for t in case.window.recalled] == [
        r["id"] for r in record["context"]["recalled"]
    ]
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ProviderDouble() as double:
        double.default = Behaviour(answer="It was 52K913.", status="answered")
        settings = Settings(environment="dev", model=MODEL, model_base_url=double.openai_base_url)

        async def no_search(*_: Any) -> NoReturn:
            raise AssertionError("a recorded window is not searched again")

        result = await run_case(
            case, load_candidate(MODEL, settings), tenant_id=TenantId("acme"), settings=settings, search=no_search
        )
        assert result.status == "answered", result
        (request,) = double.requests
    assert request.body["messages"][0]["content"] == str(windows[-1][0].content)
