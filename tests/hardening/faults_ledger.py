"""What the clients of a fault test were told, and the check of every thread against it.

A message is *acknowledged* when its client saw the run's `metadata` event (or a `200`
JSON answer). After a fault, each thread must show every acknowledged message exactly
once, nothing the clients did not send, and no half-written answer: an assistant message
is the complete answer its run record holds (and the `end` its client saw, if one did),
and a run without one is recorded as `error`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.fixtures.tokens import auth

ANSWERED = frozenset({"answered", "clarifying", "escalate"})


@dataclass
class Attempt:
    """One message a client sent, and what it saw of its run."""

    thread: str
    user: str
    content: str
    run_id: str | None = None
    tokens: str = ""
    terminal: str | None = None  # "end" | "error" | None (cut off)
    data: dict[str, Any] = field(default_factory=dict)
    status_code: int | None = None

    @property
    def acknowledged(self) -> bool:
        """Return True when the client saw `metadata` (or a 200 JSON answer)."""
        return self.run_id is not None

    @property
    def phase(self) -> str:
        """Return how far the client got: what a fault interrupted."""
        if self.run_id is None:
            return "not acknowledged"
        if self.terminal is not None:
            return f"after {self.terminal}"
        return "mid-stream" if self.tokens else "before the first token"


@dataclass
class Findings:
    """What the checks counted: messages checked and problems found."""

    threads: int = 0
    acknowledged: int = 0
    user_messages: int = 0
    answers: int = 0
    error_runs: int = 0
    problems: list[str] = field(default_factory=list)


class Ledger:
    """Every attempt of a test, by thread."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []

    def new(self, thread: str, user: str, content: str) -> Attempt:
        """Record an attempt about to be sent; its content must be unique in the test."""
        assert all(a.content != content for a in self.attempts), content
        attempt = Attempt(thread, user, content)
        self.attempts.append(attempt)
        return attempt

    def of(self, thread: str) -> list[Attempt]:
        """Return the thread's attempts, in the order they were sent."""
        return [a for a in self.attempts if a.thread == thread]

    def threads(self) -> list[str]:
        """Return every thread an attempt went to."""
        return list(dict.fromkeys(a.thread for a in self.attempts))

    async def check(self, client: httpx.AsyncClient, findings: Findings, threads: list[str] | None = None) -> None:
        """Check each thread's transcript and run records against the attempts; add to `findings`."""
        for thread in threads or self.threads():
            await _check_thread(client, thread, self.of(thread), findings)


async def read_transcript(client: httpx.AsyncClient, thread: str, user: str) -> list[dict[str, Any]]:
    """Return every message of a thread, oldest first, paging as the frontend does."""
    messages: list[dict[str, Any]] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"before": before} if before else {})}
        response = await client.get(f"/v1/threads/{thread}/messages", params=params, headers=auth(user=user))
        if response.status_code == 404 and not messages:
            return []
        assert response.status_code == 200, (thread, response.status_code, response.text)
        page = response.json()
        messages[:0] = page["messages"]
        if not page["has_more"]:
            return messages
        before = page["next_before"]


async def _check_thread(client: httpx.AsyncClient, thread: str, attempts: list[Attempt], found: Findings) -> None:
    problems = found.problems
    user = attempts[0].user
    messages = await read_transcript(client, thread, user)
    found.threads += 1
    sent = {a.content: a for a in attempts}
    ids = Counter(m["id"] for m in messages)
    problems += [f"{thread}: message {i} appears {n} times" for i, n in ids.items() if n > 1]
    users = [m for m in messages if m["role"] == "user"]
    answers = [m for m in messages if m["role"] == "assistant"]
    found.user_messages += len(users)
    found.answers += len(answers)
    contents = Counter(m["content"] for m in users)
    for content, n in contents.items():
        if content not in sent:
            problems.append(f"{thread}: a user message nobody sent ({content[:40]!r})")
        elif n > 1:
            problems.append(f"{thread}: {content[:40]!r} stored {n} times")
    by_run = {m["run_id"]: m for m in users}
    if len(by_run) != len(users):
        problems.append(f"{thread}: two user messages share a run id")
    for attempt in attempts:
        if not attempt.acknowledged:
            continue
        found.acknowledged += 1
        stored = by_run.get(attempt.run_id)
        if stored is None or stored["content"] != attempt.content:
            problems.append(f"{thread}: acknowledged message of run {attempt.run_id} ({attempt.phase}) missing")
    answered_runs = Counter(m["run_id"] for m in answers)
    problems += [f"{thread}: run {r} has {n} answers" for r, n in answered_runs.items() if n > 1]
    position = {m["id"]: i for i, m in enumerate(messages)}
    for answer in answers:
        question = by_run.get(answer["run_id"])
        if question is None or position[question["id"]] > position[answer["id"]]:
            problems.append(f"{thread}: answer of run {answer['run_id']} without its question before it")
    for run_id, question in by_run.items():
        await _check_run(client, thread, user, run_id, question, answers, sent.get(question["content"]), found)


async def _check_run(
    client: httpx.AsyncClient,
    thread: str,
    user: str,
    run_id: str,
    question: dict[str, Any],
    answers: list[dict[str, Any]],
    attempt: Attempt | None,
    found: Findings,
) -> None:
    """Check one run: its answer is whole (as recorded and as streamed), or absent and the run an error."""
    problems = found.problems
    response = await client.get(f"/v1/threads/{thread}/runs/{run_id}", headers=auth(user=user))
    if response.status_code != 200:
        problems.append(f"{thread}: run {run_id} has no record ({response.status_code})")
        return
    record = response.json()
    answer = next((m for m in answers if m["run_id"] == run_id), None)
    where = f"{thread}: run {run_id} ({attempt.phase if attempt else 'unsent'})"
    if answer is None:
        if record["status"] != "error":
            problems.append(f"{where}: no answer but recorded as {record['status']}")
        if attempt is not None and attempt.terminal == "end":
            problems.append(f"{where}: the client got `end` but the answer is not in the transcript")
        found.error_runs += 1
        return
    content = answer["content"]
    if record["status"] not in ANSWERED or (record["answer"] or {}).get("content") != content:
        problems.append(f"{where}: answer differs from the run record ({record['status']})")
    if attempt is None:
        return
    if attempt.terminal == "end" and attempt.data["message"]["content"] != content:
        problems.append(f"{where}: stored answer differs from the `end` the client saw")
    if attempt.terminal == "error":
        problems.append(f"{where}: the client got `error` but an answer was stored")
    if not content.startswith(attempt.tokens):
        problems.append(f"{where}: streamed tokens are not a prefix of the stored answer")
