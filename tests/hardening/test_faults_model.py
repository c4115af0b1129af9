"""A model that hangs, raises or streams garbage: only the documented 502/504, and a consistent thread.

Every case runs on a thread that already holds a completed turn, once as an SSE stream
and once as a JSON call. Afterwards the user's message is in the transcript once, an
answer is there whole (exactly what the tokens and `end` carried) or not at all with
the run recorded as `error`, and the next run answers.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.app import running_app
from tests.hardening.faults_ledger import Findings, Ledger
from tests.hardening.faults_model import FaultModel, FaultScript
from tests.hardening.faults_runs import json_run, next_run_answers, stream_run

TIMEOUT_SECONDS = 1.0

# (name, what the model does, the run's outcome: "end" or the error status)
CASES: list[tuple[str, dict[str, Any], Any]] = [
    ("hangs before its first token", {"mode": "hang"}, 504),
    ("hangs mid-answer", {"mode": "hang-mid"}, 504),
    ("raises before its first token", {"mode": "raise"}, 502),
    ("raises mid-answer", {"mode": "raise-mid"}, 502),
    ("streams arguments that are not JSON", {"mode": "raw-args", "answer": '{"answer": "cut \\u0000 off'}, "end"),
    ("answers in prose instead of the tool call", {"mode": "content-only"}, "end"),
    ("answers with a status outside the schema", {"status": "bogus"}, "end"),
    ("answers with a number for a status", {"status": 7}, "end"),
    ("streams lone surrogates", {"answer": "broken \ud800 text \udfff end \udbff"}, "end"),
    ("streams NUL and control characters", {"answer": "nul \x00 bell \x07 esc \x1b[31m red \x7f"}, "end"),
    ("streams line separators and SSE framing", {"answer": "a\u2028b\u2029c\x85d\r\nevent: end\ndata: {}\n\n"}, "end"),
    ("streams a huge answer", {"answer": "lorem ipsum " * 8_000}, "end"),
]


@pytest.mark.parametrize("accept", ["sse", "json"])
async def test_a_faulty_model_gets_only_documented_errors_and_leaves_the_thread_consistent(
    migrated_database_url: str, accept: str
) -> None:
    script = FaultScript()
    model = FaultModel(script=script)
    overrides = {"chat_model": model, "model_timeout_seconds": TIMEOUT_SECONDS}
    ledger, findings = Ledger(), Findings()
    outcomes: list[str] = []
    async with running_app(
        migrated_database_url, model_timeout_seconds=TIMEOUT_SECONDS, agent_overrides=overrides
    ) as client:
        for index, (name, behaviour, expected) in enumerate(CASES):
            thread = f"model-{accept}-{index}"
            script.set()  # a model that works
            await next_run_answers(client, ledger, thread, "u1", f"hello before case {index} ({accept})")
            script.set(**behaviour)
            attempt = ledger.new(thread, "u1", f"the question of case {index} ({accept})")
            if accept == "sse":
                await stream_run(client, attempt)
                assert attempt.status_code == 200, (name, attempt.status_code)
            else:
                await json_run(client, attempt)
                assert attempt.status_code == (200 if expected == "end" else expected), (name, attempt.data)
            assert attempt.acknowledged, name
            if expected == "end":
                assert attempt.terminal == "end", (name, attempt.data)
                # The contract's token rule: the deltas add up to the answer.
                assert attempt.tokens == attempt.data["message"]["content"], name
            else:
                assert attempt.terminal == "error" and attempt.data["status"] == expected, (name, attempt.data)
            outcomes.append(f"{name}: {attempt.terminal} {attempt.data.get('status')}")
            script.set()
            await next_run_answers(client, ledger, thread, "u1", f"hello after case {index} ({accept})")
            await ledger.check(client, findings, [thread])
            assert not findings.problems, (name, findings.problems)
    print(f"\nfaults: model ({accept}): " + "; ".join(outcomes))
    print(f"faults: model ({accept}): checked {findings.acknowledged} acknowledged messages, problems 0")
