"""Memory extraction with a real model: schema-validated, PII-guarded, offline fallback."""

from __future__ import annotations

from chatbot.memory.jobs import MemoryJob
from chatbot.memory.model_extraction import model_extractor
from tests.fixtures.models import ScriptedChatModel


def _job(text: str) -> MemoryJob:
    return MemoryJob(tenant_id="acme", user_id="u1", thread_id="t", run_id="r", locale="en-US", user_text=text)


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
    found = await model_extractor(model, timeout=5)(_job("I drive a Toyota Corolla 2019, what does body cover?"))
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
    found = await model_extractor(model, timeout=5)(_job("..."))
    assert [f.text for f in found.facts] == ["I live in Shiraz"]
    assert found.rejected


async def test_a_failing_or_garbage_model_falls_back_to_the_offline_rules() -> None:
    for model in (_model("fail"), _model("garbage")):
        found = await model_extractor(model, timeout=5)(_job("remember that I prefer email"))
        assert [f.text for f in found.facts] == ["I prefer email"]
