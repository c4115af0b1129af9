"""Token counting: the shipped OpenAI encodings, and the approximation's calibration on Persian."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from chatbot.agent import _tokens as tokens
from chatbot.agent._tokens import load_encoding, token_counter_for
from tests.fixtures.token_corpus import (
    ENGLISH_CORPUS,
    ENGLISH_PARAGRAPHS,
    PERSIAN_CORPUS,
    PERSIAN_PARAGRAPHS,
)

CORPORA = {"persian": (PERSIAN_CORPUS, PERSIAN_PARAGRAPHS), "english": (ENGLISH_CORPUS, ENGLISH_PARAGRAPHS)}


@pytest.fixture(scope="module")
def o200k() -> tokens.TiktokenCounter:
    return tokens.TiktokenCounter(load_encoding("o200k_base"))


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_shipped_encoding_is_tiktokens_own(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = load_encoding(name)
    # tiktoken_ext's constructor downloads the BPE file; hand it the shipped ranks instead
    # and compare everything else it defines.
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *_a, **_k: shipped._mergeable_ranks)
    official = getattr(openai_public, name)()
    assert shipped._pat_str == official["pat_str"]
    assert shipped._special_tokens == official["special_tokens"]
    assert (
        shipped.n_vocab
        == tiktoken.Encoding(
            name,
            pat_str=official["pat_str"],
            mergeable_ranks=official["mergeable_ranks"],
            special_tokens=official["special_tokens"],
        ).n_vocab
    )


def test_encodings_load_without_network_or_tiktoken_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("network access while loading a tokenizer")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    load_encoding.cache_clear()
    try:
        encoding = load_encoding("o200k_base")
    finally:
        load_encoding.cache_clear()
    assert encoding.decode(encoding.encode_ordinary("بیمه‌نامه شخص ثالث")) == "بیمه‌نامه شخص ثالث"


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("openai:gpt-4o-mini", "o200k_base"),
        ("openai:gpt-4.1", "o200k_base"),
        ("openai:gpt-4.1-mini-2025-04-14", "o200k_base"),
        ("openai:o3-mini", "o200k_base"),
        ("openai:gpt-5", "o200k_base"),
        ("openai:gpt-oss-20b", "o200k_base"),
        ("openai:gpt-4", "cl100k_base"),
        ("openai:gpt-3.5-turbo", "cl100k_base"),
        ("gpt-4o", "o200k_base"),
        ("offline", "approximate"),
        ("anthropic:claude-sonnet-4-5", "approximate"),
        ("ollama:qwen2.5", "approximate"),
        ("openai:my-finetuned-llama", "approximate"),
        ("ollama:gpt-4o", "approximate"),
    ],
)
def test_counter_follows_the_configured_model(model: str, expected: str) -> None:
    assert token_counter_for(model).name == expected


@pytest.mark.parametrize("corpus", CORPORA)
def test_approximation_does_not_undercount_o200k(corpus: str, o200k: tokens.TiktokenCounter) -> None:
    text, paragraphs = CORPORA[corpus]
    approximate = token_counter_for("offline")
    exact = o200k.count_text(text)
    ratio = approximate.count_text(text) / exact
    print(f"{corpus}: o200k={exact} approximate={approximate.count_text(text)} ({ratio - 1:+.1%})")
    # A budget may over-count a little (the margin protects other tokenizers, which are
    # worse than o200k at Persian), but must not under-count, nor waste a third of it.
    assert 0.90 <= ratio <= 1.35
    for paragraph in paragraphs:
        assert approximate.count_text(paragraph) >= 0.85 * o200k.count_text(paragraph), paragraph[:60]


def test_langchain_approximation_undercounts_persian(o200k: tokens.TiktokenCounter) -> None:
    # Why the script-aware counter exists: 4 chars per token is far too optimistic for Persian.
    langchain = count_tokens_approximately([HumanMessage(PERSIAN_CORPUS)])
    assert langchain < 0.85 * o200k.count_text(PERSIAN_CORPUS)


@pytest.mark.parametrize("model", ["openai:gpt-4o-mini", "offline"])
def test_messages_cost_content_overhead_and_tool_calls(model: str) -> None:
    counter = token_counter_for(model)
    args = {"query": "فرانشیز بیمه بدنه", "limit": 5}
    plain = AIMessage("بررسی می‌کنم.")
    calling = AIMessage("بررسی می‌کنم.", tool_calls=[{"name": "search_kb", "args": args, "id": "call_1"}])
    with_call = counter.count_messages([calling])
    assert with_call >= counter.count_messages([plain]) + counter.count_text(json.dumps(args, ensure_ascii=False))
    two = [SystemMessage("You are helpful."), HumanMessage("سلام")]
    assert counter.count_messages(two) > counter.count_text("You are helpful.") + counter.count_text("سلام") + 2


def test_tiktoken_messages_follow_openais_accounting(o200k: tokens.TiktokenCounter) -> None:
    messages = [SystemMessage("Answer briefly."), HumanMessage("بیمه بدنه چیست؟", name="ali")]
    expected = 3 + sum(3 + o200k.count_text(str(m.content)) for m in messages) + 1 + o200k.count_text("ali")
    assert o200k.count_messages(messages) == expected


def test_special_token_text_is_counted_as_text() -> None:
    counter = token_counter_for("openai:gpt-4o")
    assert counter.count_text("<|endoftext|> hello") > 2
