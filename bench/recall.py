"""Thread recall on long conversations: are the turns a late question needs in the model's input?

Builds long conversations (bench/_recall_data.py: Persian and English, 300 to 1,000 user
turns, details that come back among small talk, topic changes and distractors) through
the runs endpoint, in-process (httpx's ASGI transport against `chatbot.app.create_app`,
offline model, default settings), then asks each conversation's late questions and
reads each run's record. A needed turn counts as in the model's input when the record's
window (`context.messages`) or recalled turns (`context.recalled`) name it, or its detail
is in the summary or the remembered facts given. Prints, per kind of question and in all:
  all        share of questions with every needed turn in the input
  any        share with at least one
and the model input's median size in tokens with recall and without it (the window the
same run built before recall), and the recall step's time in those runs. Then times the
recall step alone (`ThreadRecall.find` on a thread indexed directly) at 100, 1,000 and
5,000 turns.

    .venv/bin/python -m bench.recall [--conversations 6] [--min-turns 300] [--max-turns 1000] [--seed 7]
        [--without-related] [--misses]

`--conversations 0` times the recall step alone. `--without-related` runs without the
related insurance words (recall/related.py): they were written by the same hand as this
bench's conversations, so that figure is the fairer guess of a held-out set. `--misses`
prints each question that missed a needed turn, and what recall gave instead.

Uses CHATBOT_DATABASE_URL (migrated here; the bench's threads are deleted afterwards) or
starts an embedded Postgres in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import httpx
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

import chatbot.agent._recall
import chatbot.agent.nodes
from bench._pg import bench_app
from bench._recall_data import LOCALES, Conversation, conversation
from chatbot.agent._recall import RecallAsk, Recalled, RecallStep, question_terms
from chatbot.agent._tokens import TokenCounter
from chatbot.agent._window import Window
from chatbot.cli.common import mint_token
from chatbot.config import Settings
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.recall.service import IndexWriter, Recaller, RecallQuery, ThreadRecall
from chatbot.text import normalize_persian
from chatbot.threads.deletion import delete_threads

TENANT = TenantId("bench-recall")
STEP_DEPTHS = (100, 1000, 5000)
BENCH_WRITER = IndexWriter(TENANT, UserId("bench-user"), None)  # the step alone: no lease, so no fence
HITS: int = Settings.model_fields["recall_hits"].default  # as a run searches by default


class Measured:
    """The recall step of each run, as the graph called it: input size without and with recall, and its time."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, float]] = []

    def __call__(self, recall: Recaller, settings: Settings, counter: TokenCounter) -> _TimedStep:
        """Stand in for `RecallStep` in agent/nodes.py: the same step, timed."""
        return _TimedStep(RecallStep(recall, settings, counter), self.calls)


class _TimedStep:
    """One run's recall step, its sizes and time added to `Measured.calls`."""

    def __init__(self, step: RecallStep, calls: list[tuple[int, int, float]]) -> None:
        self.step, self.calls = step, calls

    async def into(self, window: Window, ask: RecallAsk) -> Recalled:
        started = time.perf_counter()
        out = await self.step.into(window, ask)
        elapsed = (time.perf_counter() - started) * 1000
        self.calls.append((window.tokens, out.window.tokens, elapsed))
        return out


async def _transcript_user_ids(client: httpx.AsyncClient, thread: str, headers: dict[str, str]) -> list[str]:
    messages: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        page = (await client.get(f"/v1/threads/{thread}/messages", params=params, headers=headers)).json()
        messages = page["messages"] + messages
        if not page["has_more"]:
            return [m["id"] for m in messages if m["role"] == "user"]
        params = {"limit": 100, "before": page["next_before"]}


def _holds(text: str, value: str) -> bool:
    return normalize_persian(value) in normalize_persian(text)


async def _run_conversation(
    client: httpx.AsyncClient, settings: Settings, conv: Conversation, measured: Measured, thread: str
) -> list[dict[str, Any]]:
    token = mint_token(settings, tenant=TENANT, user=UserId(f"u-{thread}"), locale=LOCALES[conv.language], ttl=3600)
    headers = {"Authorization": f"Bearer {token}"}
    json_headers = {"Accept": "application/json", **headers}
    for text in conv.turns:
        response = await client.post(
            f"/v1/threads/{thread}/runs", json={"message": {"content": text}}, headers=json_headers
        )
        assert response.status_code == 200, response.text
    ids = await _transcript_user_ids(client, thread, headers)
    assert len(ids) == len(conv.turns)
    results = []
    for question in conv.questions:
        measured.calls.clear()
        body = {"message": {"content": question.text}}
        end = (await client.post(f"/v1/threads/{thread}/runs", json=body, headers=json_headers)).json()
        record = (await client.get(f"/v1/threads/{thread}/runs/{end['run_id']}", headers=headers)).json()
        context = record["context"]
        given = {m["id"] for m in context["messages"]} | {m["id"] for m in context["recalled"]}
        remembered = "\n".join([context.get("summary") or "", *map(str, context.get("facts") or [])])
        found = [
            ids[turn] in given or _holds(remembered, value)
            for turn, value in zip(question.needed, question.values, strict=True)
        ]
        without, with_recall, step = measured.calls[-1] if measured.calls else (0, 0, 0.0)
        results.append(
            {
                "kind": question.kind,
                "language": conv.language,
                "all": all(found),
                "any": any(found),
                "tokens_without": without,
                "tokens_with": with_recall,
                "step_ms": step,
                "recalled": len(context["recalled"]),
                "question": question.text,
                "needed": [conv.turns[t] for t in question.needed],
                "found": found,
                "given": [m["content"] for m in context["recalled"]],
            }
        )
    return results


def _share(rows: Sequence[dict[str, Any]], key: str) -> float:
    return sum(1 for r in rows if r[key]) / len(rows) if rows else 0.0


def _print_quality(rows: list[dict[str, Any]]) -> None:
    print(f"{'questions':<22} {'n':>4} {'all':>6} {'any':>6} {'recalled':>9}")
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["kind"]].append(r)
        groups[f"lang {r['language']}"].append(r)
    for name in sorted(groups):
        g = groups[name]
        print(
            f"{name:<22} {len(g):>4} {_share(g, 'all'):>6.2f} {_share(g, 'any'):>6.2f}"
            f" {statistics.mean(r['recalled'] for r in g):>9.1f}"
        )
    print(f"{'all questions':<22} {len(rows):>4} {_share(rows, 'all'):>6.2f} {_share(rows, 'any'):>6.2f}")
    without = statistics.median(r["tokens_without"] for r in rows)
    with_recall = statistics.median(r["tokens_with"] for r in rows)
    print(
        f"model input median tokens: {with_recall:.0f} with recall, {without:.0f} without"
        f" (x{with_recall / max(without, 1):.2f})"
    )
    steps = sorted(r["step_ms"] for r in rows)
    print(f"recall step in these runs: p50 {statistics.median(steps):.1f} ms, max {steps[-1]:.1f} ms")


def _print_misses(rows: list[dict[str, Any]]) -> None:
    """Print each question that missed a needed turn: what it asked, needed, and what recall gave."""
    for r in rows:
        if r["all"]:
            continue
        print(f"MISS {r['kind']} ({r['language']}): {r['question']}")
        for text, hit in zip(r["needed"], r["found"], strict=True):
            print(f"   needed {'+' if hit else '-'} {text}")
        for text in r["given"]:
            print(f"   given    {text[:100]}")


def _messages(conv: Conversation, depth: int) -> list[BaseMessage]:
    """Return `depth` messages of a conversation (questions and short answers), as the graph stores them."""
    out: list[BaseMessage] = []
    answers = ("Noted, thank you.", "Yes, that is covered by your policy.", "I have added that to your file.")
    for i in range(depth):
        meta = {"chatbot": {"created_at": "2026-12-01T10:00:00Z", "run_id": f"r{i // 2}"}}
        if i % 2 == 0:
            out.append(
                HumanMessage(conv.turns[(i // 2) % len(conv.turns)], id=str(uuid.uuid4()), additional_kwargs=meta)
            )
        else:
            out.append(AIMessage(answers[i % 3], id=str(uuid.uuid4()), additional_kwargs=meta))
    return out


async def _step_times(pool: Pool, seed: int) -> list[tuple[int, float, float, float]]:
    """Time `ThreadRecall.find` alone on threads of 100, 1,000 and 5,000 indexed messages."""
    recall = ThreadRecall(pool)
    rows = []
    for depth in STEP_DEPTHS:
        conv = conversation(seed + depth, random.Random(depth).choice(["en", "fa"]), max(depth // 2, 300), 20)
        thread = ThreadId(f"bench-recall-step-{uuid.uuid4().hex[:8]}")
        messages = _messages(conv, depth)
        async with pool.connection() as conn:
            for start in range(0, depth, 500):
                await recall.add_turns(conn, thread, messages[start : start + 500], start, writer=BENCH_WRITER)
        recent = messages[-79:]
        times: list[float] = []
        hits: list[int] = []
        for _ in range(3):
            for question in conv.questions:
                query = question_terms(question.text, [str(m.text) for m in recent])
                started = time.perf_counter()
                found = await recall.find(
                    RecallQuery(
                        thread,
                        BENCH_WRITER,
                        recent,
                        whole=False,
                        window_first=str(recent[-60].id),
                        terms=query,
                        question=question.text,
                        hits=HITS,
                    )
                )
                times.append((time.perf_counter() - started) * 1000)
                hits.append(len(found))
        await delete_threads(pool, [thread])
        times.sort()
        rows.append((depth, statistics.median(times), times[int(len(times) * 0.95)], statistics.mean(hits)))
    return rows


async def main(
    count: int, min_turns: int, max_turns: int, seed: int, misses: bool = False, related: bool = True
) -> None:
    """Build the conversations, ask the late questions, and print the figures."""
    if not related:
        chatbot.agent._recall.related_terms = lambda found: []
    rng = random.Random(seed)
    convs = [
        conversation(seed + i, "en" if i % 2 == 0 else "fa", rng.randint(min_turns, max_turns)) for i in range(count)
    ]
    measured = Measured()
    chatbot.agent.nodes.RecallStep = measured  # type: ignore[misc,assignment]  # times the step the graph runs
    async with bench_app("bench_recall") as (app, settings):
        services = app.state.services
        threads = [ThreadId(f"bench-recall-{uuid.uuid4().hex[:8]}") for _ in convs]
        rows: list[dict[str, Any]] = []
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=120) as client:
                for conv, thread in zip(convs, threads, strict=True):
                    started = time.perf_counter()
                    rows += await _run_conversation(client, settings, conv, measured, thread)
                    took = time.perf_counter() - started
                    print(f"  {conv.language} conversation of {len(conv.turns)} turns: {took:.0f} s", flush=True)
            steps = await _step_times(services.pool, seed)
        finally:
            await delete_threads(services.pool, threads)
    if rows:  # --conversations 0 times the recall step alone
        print(
            f"{count} conversations ({sum(len(c.turns) for c in convs)} turns), {len(rows)} questions, seed {seed},"
            f" related words {'on' if related else 'off'}"
        )
        _print_quality(rows)
        if misses:
            _print_misses(rows)
    print("recall step alone (ThreadRecall.find, index up to date):")
    for depth, p50, p95, found in steps:
        print(f"  {depth:>5} turns: p50 {p50:.1f} ms, p95 {p95:.1f} ms ({found:.1f} turns found per search)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--min-turns", type=int, default=300)
    parser.add_argument("--max-turns", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--misses", action="store_true", help="print each missed question and what was recalled")
    parser.add_argument("--without-related", action="store_true", help="no related insurance words in the query")
    args = parser.parse_args()
    asyncio.run(
        main(args.conversations, args.min_turns, args.max_turns, args.seed, args.misses, not args.without_related)
    )
