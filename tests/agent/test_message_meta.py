"""Our metadata on a persisted message is validated where it is read back (chatbot/turns.py `message_meta`)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import ValidationError

from chatbot.turns import META_KEY, message_meta


def test_the_metadata_written_reads_back_as_written() -> None:
    meta = {"created_at": "2026-01-02T03:04:05Z", "run_id": "r1", "citations": ["c1", "c2"], "status": "answered"}
    assert message_meta(AIMessage(content="an answer", additional_kwargs={META_KEY: meta})) == meta
    assert message_meta(HumanMessage(content="a question")) == {}  # written by no run of ours


def test_metadata_of_another_shape_raises_instead_of_reading_as_a_wrong_value() -> None:
    # A citation list stored as one string would otherwise be read letter by letter.
    stored = AIMessage(content="an answer", additional_kwargs={META_KEY: {"run_id": "r1", "citations": "c1"}})
    with pytest.raises(ValidationError, match="citations"):
        message_meta(stored)
