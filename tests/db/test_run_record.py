"""The run record's one type: it writes the stored JSON as it was written, and reads every stored shape.

The literal strings below are what the writers produced before the type existed (the
`retrieve` node's partial record, `generate`'s answered and failed records, a cancelled
run's end), and the records of earlier versions of `generate`. No database: the stored
form is a string in a checkpoint's JSONB (db/run_record.py).
"""

from __future__ import annotations

import json

import pytest
from pydantic import JsonValue

from chatbot.db.run_record import RecordedRun, WindowByIds
from chatbot.ids import RunId

RUN = "6f0b7c1e-2d1a-4c3b-9a55-0d6e1f2a3b4c"
SETTINGS: dict[str, JsonValue] = {
    "context_tokens": 8000,
    "summary_after_turns": 10,
    "window_history": 60,
    "fold_batch": 8,
    "tokenizer": "o200k_base",
    "language": "fa",
}
USAGE: dict[str, JsonValue] = {
    "kind": "answer",
    "model": "openai:gpt-4o-mini",
    "input_tokens": 812,
    "output_tokens": 96,
    "cached_input_tokens": 0,
}
CUTS: dict[str, JsonValue] = {"chunks_kept": 2, "chunk_permille": 1000, "chunks_omitted": False, "system_chars": None}

PARTIAL = '{"format":1,"run_id":"' + RUN + '","model":"offline","retrieved":[["car-body#9f2c",1],["renewal#77aa",3]]}'
ANSWERED = (
    '{"format":1,"run_id":"' + RUN + '","status":"answered","model":"openai:gpt-4o-mini","answer_id":"a-2",'
    '"usage":[' + json.dumps(USAGE, separators=(",", ":")) + '],"input_id":"q-2","system_prompt_sha256":"ab12",'
    '"window_span":["q-1",3],"question_chars":null,"system_cuts":' + json.dumps(CUTS, separators=(",", ":")) + ","
    '"shortened":[],"retrieved":[["car-body#9f2c",1]],"settings":' + json.dumps(SETTINGS, separators=(",", ":")) + "}"
)
FAILED = (
    '{"format":1,"run_id":"' + RUN + '","status":"error","reason":"model_timeout","model":"openai:gpt-4o-mini",'
    '"answer_id":"a-3","shown":"برای ثبت خسارت","usage":[],"input_id":"q-3","system_prompt_sha256":"ab12",'
    '"window":["q-1","q-3"],"question_chars":120,"system_cuts":null,"shortened":["question"],"retrieved":[],'
    '"settings":' + json.dumps(SETTINGS, separators=(",", ":")) + "}"
)
CANCELLED = (
    '{"format":1,"run_id":"' + RUN + '","status":"cancelled","reason":"cancelled","model":"offline",'
    '"answer_id":"a-4","shown":"To file","input_id":"q-4","retrieved":[["car-body#9f2c",1]],"usage":[]}'
)
# `generate` before the model chain (no usage, reason or shown) and before the window span.
BEFORE_USAGE = (
    '{"format":1,"run_id":"' + RUN + '","status":"answered","model":"offline","input_id":"q-1","answer_id":"a-1",'
    '"system_prompt_sha256":"ab12","window":["q-0","a-0","q-1"],"question_chars":null,'
    '"system_cuts":' + json.dumps(CUTS, separators=(",", ":")) + ',"shortened":[],"retrieved":[],'
    '"settings":' + json.dumps(SETTINGS, separators=(",", ":")) + "}"
)
# The first records: no system_cuts either.
FIRST = (
    '{"format":1,"run_id":"' + RUN + '","status":"escalate","model":"offline","input_id":"q-1","answer_id":"a-1",'
    '"system_prompt_sha256":"ab12","window":["q-1"],"question_chars":null,"shortened":["chunks"],'
    '"retrieved":[["car-body#9f2c",2]],"settings":' + json.dumps(SETTINGS, separators=(",", ":")) + "}"
)


def test_the_partial_record_is_written_as_before_and_reads_back() -> None:
    written = RecordedRun(RunId(RUN), model="offline", retrieved=(("car-body#9f2c", 1), ("renewal#77aa", 3)))
    assert written.dump() == PARTIAL
    read = RecordedRun.parse(PARTIAL)
    assert read == written
    assert read is not None and read.status is None and read.window is None and read.usage is None


def test_an_answered_record_is_written_as_before_and_reads_back() -> None:
    written = RecordedRun(
        RunId(RUN),
        status="answered",
        model="openai:gpt-4o-mini",
        answer_id="a-2",
        usage=(USAGE,),
        input_id="q-2",
        system_prompt_sha256="ab12",
        window=WindowByIds(span=("q-1", 3), system_cuts=CUTS),
        shortened=(),
        retrieved=(("car-body#9f2c", 1),),
        settings=SETTINGS,
    )
    assert written.dump() == ANSWERED
    assert RecordedRun.parse(ANSWERED) == written


def test_a_failed_record_keeps_the_shown_text_and_the_listed_window() -> None:
    written = RecordedRun(
        RunId(RUN),
        status="error",
        reason="model_timeout",
        model="openai:gpt-4o-mini",
        answer_id="a-3",
        shown="برای ثبت خسارت",
        usage=(),
        input_id="q-3",
        system_prompt_sha256="ab12",
        window=WindowByIds(ids=("q-1", "q-3"), question_chars=120),
        shortened=("question",),
        settings=SETTINGS,
    )
    assert written.dump() == FAILED  # not ASCII-escaped, nulls kept where they were written
    read = RecordedRun.parse(FAILED)
    assert read == written
    assert read is not None and read.window is not None and read.window.span is None


def test_a_cancelled_record_stores_the_same_keys_and_values() -> None:
    written = RecordedRun(
        RunId(RUN),
        status="cancelled",
        reason="cancelled",
        model="offline",
        answer_id="a-4",
        shown="To file",
        input_id="q-4",
        retrieved=(("car-body#9f2c", 1),),
        usage=(),
    )
    # The one writer whose key order the type changes (`usage` before `input_id`); the
    # object is the same, and every reader decodes it as one.
    assert json.loads(written.dump()) == json.loads(CANCELLED)
    assert RecordedRun.parse(CANCELLED) == written


def test_records_of_earlier_versions_read() -> None:
    before_usage = RecordedRun.parse(BEFORE_USAGE)
    assert before_usage is not None
    assert before_usage.status == "answered" and before_usage.usage is None and before_usage.shown is None
    assert before_usage.window == WindowByIds(ids=("q-0", "a-0", "q-1"), system_cuts=CUTS)
    first = RecordedRun.parse(FIRST)
    assert first is not None and first.window == WindowByIds(ids=("q-1",))
    assert first.shortened == ("chunks",) and first.retrieved == (("car-body#9f2c", 2),)
    assert first.settings == SETTINGS


def test_keys_it_does_not_know_are_ignored() -> None:
    stored = json.loads(ANSWERED) | {"later": {"x": 1}}
    assert RecordedRun.parse(json.dumps(stored)) == RecordedRun.parse(ANSWERED)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",  # a run's first checkpoint empties the channel
        "not json",
        "{not json",
        "[1, 2]",
        '{"format": 2, "run_id": "r"}',
        '{"run_id": "r", "status": "answered"}',
        '{"format": 1, "status": "answered"}',
        '{"format": 1, "run_id": 7}',
        b'{"format": 1, "run_id": "r"}',
    ],
)
def test_what_is_not_a_record_reads_as_none(raw: object) -> None:
    assert RecordedRun.parse(raw) is None


def test_ill_typed_parts_read_as_absent() -> None:
    raw = json.dumps(
        {
            "format": 1,
            "run_id": RUN,
            "status": "",
            "model": 3,
            "usage": [USAGE, "x"],
            "window_span": ["q-1"],
            "window": "q-1",
            "question_chars": True,
            "retrieved": [["c#1", 1], ["c#2"], "c#3", ["c#4", "2"]],
            "settings": [],
        }
    )
    assert RecordedRun.parse(raw) == RecordedRun(RunId(RUN), usage=(USAGE,), retrieved=(("c#1", 1),))
