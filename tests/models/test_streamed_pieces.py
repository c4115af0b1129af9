"""Streamed deltas add up to the answer exactly, however the provider cuts its pieces.

The scanner of the `answer` string is checked at every piece boundary of answers full of
JSON escapes (a boundary inside each kind of escape, surrogate pairs escaped and raw),
English and Persian; then each real-provider path (OpenAI json_schema, OpenAI tools,
Anthropic tools) through the wire double, and the offline responder's own pieces.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from typing import Any

import pytest

from chatbot.agent.modelcall import StructuredAnswer
from chatbot.models.answer_field import AnswerField
from chatbot.models.chain import ChainEntry, load_model, normalise_base_url
from chatbot.models.offline import split_tokens
from chatbot.models.structured import Limits, Streamed, stream_structured
from tests.fixtures.provider_double import Behaviour, ProviderDouble, english_answer, persian_answer

# Every JSON escape: the simple ones, \uXXXX of a BMP character, and a surrogate pair.
TRICKY = 'line one\nsaid "yes" \\ back/slash\ttab\r\x08\x0c é 😀 end'
ANSWERS = {
    "en": english_answer(90) + TRICKY,
    "fa": persian_answer(90) + TRICKY + " ۱۲۳ «نقل‌قول» 😀",
}
SCHEMA = StructuredAnswer.model_json_schema()
PATHS = {
    "json_schema": "openai:gpt-4o-mini",
    "tools": "openai:gpt-4-turbo",
    "anthropic": "anthropic:claude-haiku-4-5",
}


def payload(answer: str, *, ascii_only: bool) -> str:
    """Return the structured object as a provider writes it (escaped to ASCII or not)."""
    obj = {"status": "answered", "answer": answer, "citations": ["c-1"]}
    return json.dumps(obj, ensure_ascii=ascii_only)


def fed(text: str, cuts: list[int]) -> tuple[str, list[str]]:
    """Feed `text` cut at `cuts`; return the answer handed out and the deltas."""
    field = AnswerField()
    bounds = [0, *cuts, len(text)]
    deltas = [field.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    assert field.text == text
    return "".join(deltas), [d for d in deltas if d]


@pytest.mark.parametrize("lang", list(ANSWERS))
@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "raw"])
def test_a_boundary_anywhere_even_inside_an_escape_loses_and_repeats_nothing(lang: str, ascii_only: bool) -> None:
    answer = ANSWERS[lang]
    text = payload(answer, ascii_only=ascii_only)
    if ascii_only:  # every kind of escape is there to be cut
        for escape in ('\\n', '\\"', "\\\\", "\\/" if "\\/" in text else "\\t", "\\r", "\\b", "\\f",
                       "\\u00e9", "\\ud83d\\ude00"):  # fmt: skip
            assert escape in text, escape
    for cut in range(1, len(text)):
        whole, deltas = fed(text, [cut])
        assert whole == answer, cut
        assert all(d.encode() for d in deltas)  # never a lone surrogate: every delta encodes


@pytest.mark.parametrize("lang", list(ANSWERS))
def test_every_piece_size_and_random_cuts_add_up_to_the_answer(lang: str) -> None:
    answer = ANSWERS[lang]
    rng = random.Random(20)
    for ascii_only in (True, False):
        text = payload(answer, ascii_only=ascii_only)
        for size in (1, 2, 3, 4, 5, 7):
            assert fed(text, list(range(size, len(text), size)))[0] == answer, size
        for _ in range(50):
            cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 40)))
            assert fed(text, cuts)[0] == answer


def test_a_pair_split_between_two_escapes_waits_and_an_unpaired_one_is_replaced() -> None:
    head = '{"answer": "a\\ud83d'
    field = AnswerField()
    assert field.feed(head) == "a"  # the high surrogate waits for its pair
    assert field.feed("\\ude00b") == "😀b"
    lone = AnswerField()
    assert lone.feed('{"answer": "x\\ud83d') == "x"
    assert lone.feed(' y"}') == "\ufffd y"


def test_an_escaped_slash_and_unknown_keys_around_the_answer_are_read_at_every_cut() -> None:
    text = '{"status": "answered", "note": "answer\\"", "answer": "a\\/b\\u0041", "citations": ["answer"]}'
    for cut in range(1, len(text)):
        assert fed(text, [cut])[0] == "a/bA", cut


def test_the_offline_responders_pieces_add_up_to_its_answer() -> None:
    for answer in ANSWERS.values():
        assert "".join(split_tokens(answer)) == answer


async def structured(entry: ChainEntry) -> tuple[Streamed, list[str]]:
    state, deltas = Streamed(), list[str]()
    loop = asyncio.get_running_loop()
    limits = Limits(first_token=10, idle=10, deadline=loop.time() + 30)
    await stream_structured(entry, [], SCHEMA, limits=limits, on_delta=deltas.append, into=state)
    return state, deltas


@pytest.fixture(scope="module")
def double() -> Any:
    with ProviderDouble() as d:
        yield d


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("lang", list(ANSWERS))
@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "raw"])
async def test_each_provider_path_streams_deltas_that_add_up_to_the_answer(
    double: ProviderDouble, monkeypatch: pytest.MonkeyPatch, path: str, lang: str, ascii_only: bool
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    double.reset()
    answer = ANSWERS[lang]
    # 3-character pieces: every escape is cut somewhere across the sizes of the text before it.
    double.default = Behaviour(raw_json=payload(answer, ascii_only=ascii_only), piece_chars=3, usage=(50, 20, 8))
    spec = PATHS[path]
    provider = spec.partition(":")[0]
    url = double.openai_base_url if provider == "openai" else double.anthropic_base_url
    entry = ChainEntry(spec, load_model(spec, base_url=normalise_base_url(provider, url), retries=0))
    state, deltas = await structured(entry)
    assert "".join(deltas) == state.answer == answer
    assert len(deltas) > 20  # streamed piece by piece, not handed out whole at the end
    assert state.stop(reports_finish=True) == "normal"
    assert state.parsed() == {"status": "answered", "answer": answer, "citations": ["c-1"]}
    usage: dict[str, Any] = dict(state.usage or {})
    assert (usage.get("input_tokens"), usage.get("output_tokens")) == (50, 20)
    assert (usage.get("input_token_details") or {}).get("cache_read") == 8
    (request,) = double.requests
    assert request.stream and request.kind == ("json" if path == "json_schema" else "tool")


@pytest.mark.parametrize("path", list(PATHS))
async def test_an_error_event_mid_stream_keeps_what_was_shown_and_reads_as_the_status_it_means(
    double: ProviderDouble, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    from chatbot.agent.modelcall import provider_status

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    double.reset()
    double.default = Behaviour(answer=english_answer(400), finish="error_event")
    spec = PATHS[path]
    provider = spec.partition(":")[0]
    url = double.openai_base_url if provider == "openai" else double.anthropic_base_url
    entry = ChainEntry(spec, load_model(spec, base_url=url, retries=0))
    state, deltas = Streamed(), list[str]()
    limits = Limits(first_token=10, idle=10, deadline=asyncio.get_running_loop().time() + 30)
    with pytest.raises(Exception) as caught:
        await stream_structured(entry, [], SCHEMA, limits=limits, on_delta=deltas.append, into=state)
    assert provider_status(caught.value) == (529 if provider == "anthropic" else 500)
    assert "".join(deltas) == state.answer != ""
