"""Memory extraction with a real chat model: structured output against a schema, then the guard.

The model proposes profile updates and facts; everything it returns is validated by the
schema, bounded, keyed by the same deterministic rules as the offline extractor, and still
passes the PII guard in the writer. When the model fails or returns garbage, the offline
rules' result is used, so a flaky provider costs recall, never safety.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from chatbot.memory.extraction import DEFAULT_PRODUCTS, MAX_FACT_CHARS, FactCandidate, MemoryCandidates, extract_offline
from chatbot.memory.fact_keys import classify_fact
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.pii import is_health_category, rejection_reason
from chatbot.memory.writer import Extractor

log = logging.getLogger(__name__)

_PROMPT = (
    "You maintain long-term memory about a customer of an insurance company. From the customer's message, "
    "extract only durable facts that will help future conversations (products held or asked about, vehicle, "
    "city, household, contact and language preferences, things the customer explicitly asks to be remembered). "
    "Never extract national ID numbers, bank card or account numbers, IBAN/Sheba, passwords, CVV, expiry dates, "
    "or any health information (conditions, medications, diagnoses, pregnancy). Never extract one-off details "
    "of this turn. Write each fact as a short first-person statement in the customer's language."
)


class ExtractedFact(BaseModel):
    """One durable fact about the customer."""

    text: str = Field(max_length=MAX_FACT_CHARS)
    category: Literal["preference", "vehicle", "residence", "policy", "household", "contact", "other"] = "other"


class ExtractedMemory(BaseModel):
    """What the model may propose to remember from one message."""

    language: Literal["fa", "en"] | None = None
    formality: Literal["formal", "informal"] | None = None
    products: list[Literal[tuple(DEFAULT_PRODUCTS)]] = Field(default_factory=list)  # type: ignore[valid-type]
    facts: list[ExtractedFact] = Field(default_factory=list, max_length=10)


def model_extractor(model: BaseChatModel, *, timeout: float) -> Extractor:
    """Return an extractor that asks `model` and falls back to the offline rules."""

    async def extract(job: MemoryJob) -> MemoryCandidates:
        baseline = extract_offline(job.user_text, locale=job.locale)
        try:
            structured = model.with_structured_output(ExtractedMemory)
            async with asyncio.timeout(timeout):
                raw = await structured.ainvoke([SystemMessage(_PROMPT), HumanMessage(job.user_text)])
            proposed = raw if isinstance(raw, ExtractedMemory) else ExtractedMemory.model_validate(raw)
        except Exception as exc:
            log.warning("memory extraction by model failed", extra={"run_id": job.run_id, "error": type(exc).__name__})
            return baseline
        return _merge(baseline, proposed)

    return extract


def _merge(baseline: MemoryCandidates, proposed: ExtractedMemory) -> MemoryCandidates:
    updates = dict(baseline.profile_updates)
    if proposed.language:
        updates.setdefault("language", proposed.language)
    if proposed.formality:
        updates.setdefault("formality", proposed.formality)
    if proposed.products:
        updates["products"] = list(dict.fromkeys([*updates.get("products", []), *proposed.products]))
    facts = list(baseline.facts)
    rejected = list(baseline.rejected)
    known = {f.text for f in facts}
    for fact in proposed.facts:
        text = fact.text.strip()
        if not text or text in known:
            continue
        category, key = classify_fact(text)
        reason = rejection_reason(text, category=fact.category)
        if reason is not None or is_health_category(fact.category):
            if reason is not None:
                rejected.append(reason)
            continue
        facts.append(FactCandidate(text=text, category=category, key=key))
        known.add(text)
    return MemoryCandidates(profile_updates=updates, facts=facts, rejected=rejected)
