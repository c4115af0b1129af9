"""What the clients were acknowledged, per thread, and the check of a transcript against it.

A user message is *acknowledged* when its client got the run's `metadata` event (or the
JSON `end`): from then on the service owes it to the transcript, once, in order. A message
whose request got no answer at all (the connection dropped before one came) is a *maybe*:
the service may or may not have started its run, so it may appear, at most once. Messages
are told apart by their run id (the transcript carries it), so a message sent again after
a drop is checked as two sends, whichever of them landed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from chatbot.responses import TranscriptMessage


@dataclass
class ThreadLedger:
    """One thread as its client knows it."""

    thread_id: str
    owner: str
    acked: list[tuple[str, str]] = field(default_factory=list)
    """(run_id, content) of every acknowledged user message, in the order acknowledged."""
    maybe: Counter[str] = field(default_factory=Counter)
    """Contents sent without any answer: each may appear once."""
    answers: dict[str, str] = field(default_factory=dict)
    """run_id -> the answer the client received in `end` (tokens and rejoins included)."""
    gone: str | None = None
    """Why the thread must now be `404`: "deleted" or "erased"."""

    def ack(self, run_id: str, content: str) -> None:
        """Record that a run of this message was acknowledged."""
        self.acked.append((run_id, content))

    def answer(self, run_id: str, content: str) -> None:
        """Record the answer a run's `end` carried."""
        self.answers[run_id] = content

    @property
    def runs(self) -> set[str]:
        """Return the acknowledged run ids."""
        return {run_id for run_id, _ in self.acked}


@dataclass
class Verdict:
    """The outcome of checking one transcript."""

    user_checked: int = 0
    answers_checked: int = 0
    maybes_landed: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """Return every problem found."""
        return self.lost + self.duplicated + self.other

    def add(self, other: Verdict) -> None:
        """Add another verdict's counts and problems to this one."""
        self.user_checked += other.user_checked
        self.answers_checked += other.answers_checked
        self.maybes_landed += other.maybes_landed
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.other += other.other


def check_transcript(ledger: ThreadLedger, messages: list[TranscriptMessage]) -> Verdict:
    """Compare a thread's whole transcript (oldest first) with what its client was acknowledged.

    Problems name threads, runs and message ids, never message text.
    """
    verdict = Verdict()
    where = f"thread {ledger.thread_id}"
    ids = Counter(m.id for m in messages)
    verdict.duplicated += [f"{where}: message id {i} appears {n} times" for i, n in ids.items() if n > 1]

    users = [m for m in messages if m.role == "user"]
    user_runs = Counter(m.run_id for m in users)
    verdict.duplicated += [
        f"{where}: run {run} has {n} user messages" for run, n in user_runs.items() if n > 1 and run is not None
    ]
    acked = ledger.runs
    expected = {run_id: content for run_id, content in ledger.acked}
    seen_acked = [m for m in users if m.run_id in acked]
    missing = acked - {m.run_id for m in seen_acked}
    verdict.lost += [f"{where}: acknowledged user message of run {run} is missing" for run in sorted(missing)]
    for m in seen_acked:
        if m.content != expected[str(m.run_id)]:
            verdict.other.append(f"{where}: user message {m.id} of run {m.run_id} differs from what was sent")
    if not missing and [m.content for m in seen_acked] != [content for _, content in ledger.acked]:
        verdict.other.append(f"{where}: acknowledged user messages are out of order")
    verdict.user_checked += len(seen_acked)

    maybes = Counter(ledger.maybe)
    for m in users:
        if m.run_id in acked:
            continue
        if maybes[m.content] > 0:  # a send whose answer never came back landed after all
            maybes[m.content] -= 1
            verdict.maybes_landed += 1
            verdict.user_checked += 1
        else:
            verdict.duplicated.append(f"{where}: user message {m.id} (run {m.run_id}) was never sent or sent twice")

    position = {m.run_id: i for i, m in enumerate(messages) if m.role == "user"}
    assistants = [m for m in messages if m.role == "assistant"]
    answer_runs = Counter(m.run_id for m in assistants)
    verdict.duplicated += [f"{where}: run {run} has {n} answers" for run, n in answer_runs.items() if n > 1]
    for i, m in enumerate(messages):
        if m.role != "assistant":
            continue
        if m.run_id not in position or position[m.run_id] > i:
            verdict.other.append(f"{where}: answer {m.id} has no user message of its run {m.run_id} before it")
        elif position[m.run_id] != i - 1:
            # One run at a time per thread: nothing comes between a message and its answer.
            verdict.other.append(f"{where}: runs interleaved: answer {m.id} does not follow its run's message")
    by_run: dict[str | None, TranscriptMessage] = {m.run_id: m for m in assistants}
    for run_id, answer in ledger.answers.items():
        got = by_run.get(run_id)
        if got is None:
            verdict.lost.append(f"{where}: answer of run {run_id} is missing")
        elif got.content != answer:
            verdict.other.append(f"{where}: answer {got.id} of run {run_id} differs from the one streamed")
        else:
            verdict.answers_checked += 1
    return verdict
