"""Memory extraction with a real model: schema-validated, PII-guarded, offline fallback."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from chatbot.memory.model_extraction import model_extractor
from tests.fixtures.memory_jobs import memory_job
from tests.fixtures.models import ScriptedChatModel
from tests.fixtures.provider_double import Behaviour, ProviderDouble


def _model(mode: str, reply: dict[str, object] | None = None) -> ScriptedChatModel:
    return ScriptedChatModel(mode=mode, reply=reply or {}, tool_name="ExtractedMemory")


async def test_facts_the_model_finds_are_kept_and_keyed() -> None:
    model = _model(
        "answer",
        {
            "language": "en",
            "products": ["car_body"],
            "facts": [{"text": "I drive a Toyota Corolla 2019", "category": "vehicle"}],
        },
    )
    found = await model_extractor(model, timeout=5)(memory_job("I drive a Toyota Corolla 2019, what does body cover?"))
    assert [f.text for f in found.facts] == ["I drive a Toyota Corolla 2019"]
    assert found.facts[0].key  # keyed like offline facts, so a later restatement replaces it
    assert "car_body" in found.profile_updates["products"]


async def test_pii_and_health_the_model_proposes_are_dropped() -> None:
    model = _model(
        "answer",
        {
            "facts": [
                {"text": "My card number is 6037 9975 9912 3456", "category": "other"},
                {"text": "I take insulin every day", "category": "other"},
                {"text": "I live in Shiraz", "category": "residence"},
            ]
        },
    )
    found = await model_extractor(model, timeout=5)(memory_job("I live in Shiraz, as I said."))
    assert [f.text for f in found.facts] == ["I live in Shiraz"]
    assert found.rejected


async def test_a_failing_or_garbage_model_falls_back_to_the_offline_rules() -> None:
    for model in (_model("fail"), _model("garbage")):
        found = await model_extractor(model, timeout=5)(memory_job("remember that I prefer email"))
        assert [f.text for f in found.facts] == ["I prefer email"]


class _Counting(ScriptedChatModel):
    """A scripted extraction model that counts the calls it gets."""

    calls: list[str] = []  # noqa: RUF012 - a pydantic field, copied per instance

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append("call")
        return await super()._agenerate(messages, stop, run_manager, **kwargs)


async def test_the_model_is_asked_only_when_the_writer_says_something_about_themselves() -> None:
    model = _Counting(mode="answer", reply={}, tool_name="ExtractedMemory", calls=[])
    extract = model_extractor(model, timeout=5)
    for question in (
        "What does my travel insurance cover?",
        "Can I claim for a broken window?",
        "How do I renew third-party insurance?",
        "بیمه سفر من چه چیزی را پوشش می‌دهد؟",
    ):
        await extract(memory_job(question))
    assert model.calls == []  # questions teach memory nothing: no provider call
    for statement in ("I drive a Peugeot 206, what does body cover?", "من در اصفهان زندگی می‌کنم."):
        await extract(memory_job(statement))
    assert len(model.calls) == 2


async def test_negative_token_counts_from_the_memory_model_keep_the_fact_and_count_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A real provider package against the wire double, reporting counts below zero.
    from langchain_openai import ChatOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    reply = {"facts": [{"text": "I drive a Toyota Corolla 2019", "category": "vehicle"}]}
    with ProviderDouble() as double:
        double.default = Behaviour(obj=reply, usage=(-5, -7, -1))
        model = ChatOpenAI(model="gpt-4o-mini", base_url=double.openai_base_url, max_retries=0)
        found = await model_extractor(model, timeout=10, name="openai:gpt-4o-mini")(
            memory_job("I drive a Toyota Corolla 2019, what does body cover?")
        )
        assert len(double.requests) == 1
    assert [f.text for f in found.facts] == ["I drive a Toyota Corolla 2019"]
