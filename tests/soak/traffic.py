"""A virtual user of the soak: one (tenant, user), its threads, and the operations it mixes.

Each virtual user is its own (tenant, user), so its erasures touch nobody else's threads,
and it works sequentially, as a backend session does; concurrency comes from many users
at once, from the runs a dropped connection leaves going, and from double sends. Every
operation picks a replica at random, and rejoins and double sends use both.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx

from chatbot.client import AsyncChatbotClient, ChatbotError, ConflictError, MintedTokens, RunEnd, StreamInterrupted, api
from chatbot.client.events import SSEDecoder
from chatbot.responses import TranscriptMessage
from tests.soak.ledger import ThreadLedger, Verdict, check_transcript
from tests.soak.messages import MARKER, QUESTIONS, REMEMBER
from tests.soak.tally import Tally, TallyingTransport
from tests.soak.wire import post_and_hang_up

# Weights of the operations: runs dominate, as in the product; erasures come on a schedule.
WEIGHTS = {
    "run (stream)": 24,
    "run (json)": 12,
    "remember": 4,
    "page": 14,
    "rejoin": 10,
    "feedback": 8,
    "memory read": 6,
    "double send": 8,
    "resend after drop": 5,
    "delete thread": 3,
}


class VirtualUser:
    """One (tenant, user) sending mixed traffic to the replicas and recording what it was told."""

    def __init__(
        self, index: int, tenant: str, user: str, locale: str, bases: list[str], secret: str, tally: Tally, seed: int
    ) -> None:
        self.index, self.tenant, self.user = index, tenant, user
        self.name = f"{tenant}/{user}"
        self.bases = bases
        self.tally = tally
        self.rng = random.Random(seed)
        self.tokens = MintedTokens(secret, tenant_id=tenant, user_id=user, locale=locale)
        self.clients = [
            AsyncChatbotClient(base, self.tokens, user_id=user, transport=TallyingTransport(tally)) for base in bases
        ]
        self.http = [httpx.AsyncClient(base_url=base, transport=TallyingTransport(tally), timeout=30) for base in bases]
        self.threads: list[ThreadLedger] = []
        self.generation = 0  # bumped by every erasure: older markers must never be remembered again
        self.sent = 0
        self.ops: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.problems: list[str] = []
        self.checked = Verdict()
        """Whole transcripts checked at the end of a thread's life: before its deletion or erasure, or at the end."""
        self.remembered_seen = 0
        """Remembered facts (with a marker) that memory reads returned: the memory check is not vacuous."""
        self.midway = Verdict()
        """Whole transcripts checked while the soak goes on (the page operation)."""
        self.erase_at = self.rng.randint(20, 45)
        self.operations: dict[str, Callable[[], Awaitable[None]]] = {
            "run (stream)": self.run_stream,
            "run (json)": self.run_json,
            "remember": self.remember,
            "page": self.page,
            "rejoin": self.rejoin,
            "feedback": self.feedback,
            "memory read": self.memory_read,
            "double send": self.double_send,
            "resend after drop": self.resend_after_drop,
            "delete thread": self.delete_thread,
            "erase user": self.erase,
        }

    async def aclose(self) -> None:
        """Close every connection."""
        async with AsyncExitStack() as stack:
            for client in self.clients:
                stack.push_async_callback(client.aclose)
            for http in self.http:
                stack.push_async_callback(http.aclose)

    async def soak(self, deadline: float, think: float) -> None:
        """Run operations until the loop's clock passes `deadline`."""
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:  # not polling: the soak's traffic, for its duration
            kind = self.next_kind()
            try:
                await self.operations[kind]()
            except ChatbotError as exc:
                self.problems.append(f"{self.name} {kind}: unexpected {exc.status}")
            except (httpx.HTTPError, StreamInterrupted, OSError) as exc:
                self.problems.append(f"{self.name} {kind}: {type(exc).__name__}")
            self.ops[kind] += 1
            await asyncio.sleep(self.rng.uniform(0, think))  # not polling: a user's think time

    def next_kind(self) -> str:
        """Return the next operation: an erasure when its turn has come, else one drawn by weight."""
        if sum(self.ops.values()) >= self.erase_at:
            # Rare enough that threads grow long between erasures, often enough that every
            # user erases itself early in a short soak too.
            self.erase_at += self.rng.randint(80, 160)
            return "erase user"
        return self.rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]

    # Picking threads, clients and messages -------------------------------------------------

    def live(self) -> list[ThreadLedger]:
        """Return the threads not deleted or erased."""
        return [t for t in self.threads if t.gone is None]

    def thread(self) -> ThreadLedger:
        """Return a live thread, or a new one now and then (always when there is none)."""
        live = self.live()
        if live and (len(live) >= 4 or self.rng.random() > 0.25):
            return self.rng.choice(live)
        ledger = ThreadLedger(f"soak-{self.tenant}-{self.user}-g{self.generation}-{len(self.threads)}", self.name)
        self.threads.append(ledger)
        return ledger

    def replica(self) -> int:
        """Return the index of a replica chosen at random."""
        return self.rng.randrange(len(self.bases))

    def content(self, template: str | None = None) -> str:
        """Return a message no other send carries (a numbered question, or a remember request)."""
        self.sent += 1
        if template is not None:
            return template.format(marker=f"mk{self.index}g{self.generation}n{self.sent}")
        return f"{self.rng.choice(QUESTIONS)} ({self.index}.{self.sent})"

    def headers(self, accept: str) -> dict[str, str]:
        """Return the headers of a raw request."""
        return {"Authorization": f"Bearer {self.tokens()}", "Accept": accept}

    # Runs ------------------------------------------------------------------------------------

    async def stream_run(self, client: AsyncChatbotClient, ledger: ThreadLedger, content: str) -> str:
        """Send a message with the typed client and follow its stream; return "answered", "409" or "failed"."""
        tokens: list[str] = []
        run_id: str | None = None
        try:
            async for event in client.stream(ledger.thread_id, content):
                if event.event == "metadata":
                    run_id = str(event.data["run_id"])
                    ledger.ack(run_id, content)
                elif event.event == "token":
                    tokens.append(str(event.data["content"]))
                elif event.event == "end":
                    return self.ended(ledger, event.end(), "".join(tokens))
                elif event.event == "error":
                    self.problems.append(f"{self.name}: run {run_id} failed with {event.data.get('status')}")
                    return "failed"
        except ConflictError:
            return "409"
        except (httpx.TransportError, StreamInterrupted):
            if run_id is None:
                ledger.maybe[content] += 1  # no answer at all: the run may or may not have started
            raise
        self.problems.append(f"{self.name}: the stream of run {run_id} ended without end or error")
        return "failed"

    async def json_run(self, replica: int, ledger: ThreadLedger, content: str) -> str:
        """Send a message asking for JSON (wait for `end`); return "answered", "409" or "failed"."""
        try:
            response = await self.http[replica].post(
                api.runs_path(ledger.thread_id), json=api.run_body(content), headers=self.headers(api.JSON)
            )
        except httpx.TransportError:
            ledger.maybe[content] += 1  # no answer at all: the run may or may not have started
            raise
        if response.status_code == 409:
            return "409"
        if response.status_code != 200:
            self.problems.append(f"{self.name}: JSON run on {ledger.thread_id} answered {response.status_code}")
            return "failed"
        end = RunEnd.model_validate(response.json())
        ledger.ack(end.run_id, content)
        return self.ended(ledger, end, end.message.content)

    def ended(self, ledger: ThreadLedger, end: RunEnd, streamed: str) -> str:
        """Record a run's `end`; the text streamed before it must be the answer."""
        if streamed != end.message.content:
            self.problems.append(f"{self.name}: tokens of run {end.run_id} do not add up to its answer")
        ledger.answer(end.run_id, end.message.content)
        return "answered"

    async def run_stream(self) -> None:
        """Send a message and stream its answer."""
        ledger = self.thread()
        outcome = await self.stream_run(self.clients[self.replica()], ledger, self.content())
        self.outcomes[f"run (stream): {outcome}"] += 1

    async def run_json(self) -> None:
        """Send a message and wait for its answer as JSON."""
        ledger = self.thread()
        self.outcomes[f"run (json): {await self.json_run(self.replica(), ledger, self.content())}"] += 1

    async def remember(self) -> None:
        """Ask for something to be remembered (a marker that names this user and generation)."""
        ledger = self.thread()
        outcome = await self.stream_run(self.clients[self.replica()], ledger, self.content(REMEMBER))
        self.outcomes[f"remember: {outcome}"] += 1

    async def double_send(self) -> None:
        """Send one message twice at once, to both replicas: one answered and one 409, or both in turn."""
        ledger = self.thread()
        content = self.content()
        first, second = self.replica(), self.replica()
        results = await asyncio.gather(
            self.stream_run(self.clients[first], ledger, content),
            self.json_run(second, ledger, content)
            if self.rng.random() < 0.5
            else self.stream_run(self.clients[second], ledger, content),
        )
        self.outcomes[f"double send: {' + '.join(sorted(results))}"] += 1

    async def rejoin(self) -> None:
        """Drop a stream after a few tokens, rejoin it on the other replica; before + after must be the answer."""
        ledger = self.thread()
        content = self.content()
        origin = self.replica()
        try:
            run_id, last_id, before = await self.stream_then_hang_up(origin, ledger, content)
        except httpx.TransportError:
            if not any(text == content for _, text in ledger.acked):
                ledger.maybe[content] += 1  # no answer at all: the run may or may not have started
            raise
        if run_id is None:
            return
        after: list[str] = []
        target = self.clients[(origin + 1) % len(self.clients)]
        async for event in target.join(ledger.thread_id, run_id, last_id):
            if event.event == "token":
                after.append(str(event.data["content"]))
            elif event.event == "end":
                self.outcomes[f"rejoin: {self.ended(ledger, event.end(), ''.join(before + after))}"] += 1
                return
            elif event.event == "error":
                self.problems.append(f"{self.name}: rejoined run {run_id} failed with {event.data.get('status')}")
                return

    async def stream_then_hang_up(
        self, replica: int, ledger: ThreadLedger, content: str
    ) -> tuple[str | None, str | None, list[str]]:
        """Start a streamed run, read one to three token events and close the connection.

        Return the run id (None if the run was refused), the last event id and the tokens read.
        """
        run_id, last_id, before = None, None, []
        drop_after = self.rng.randint(1, 3)
        async with self.http[replica].stream(
            "POST", api.runs_path(ledger.thread_id), json=api.run_body(content), headers=self.headers(api.SSE)
        ) as response:
            if response.status_code != 200:
                await response.aread()
                self.problems.append(f"{self.name}: a run on {ledger.thread_id} answered {response.status_code}")
                return None, None, []
            decoder = SSEDecoder()
            async for line in response.aiter_lines():
                event = decoder.feed(line)
                if event is None:
                    continue
                last_id = event.id
                if event.event == "metadata":
                    run_id = str(event.data["run_id"])
                    ledger.ack(run_id, content)
                elif event.event == "token":
                    before.append(str(event.data["content"]))
                    if len(before) >= drop_after:
                        break
                elif event.event in ("end", "error"):
                    break
        # Leaving the block mid-stream closed the connection: the run goes on without us.
        if run_id is None:
            self.problems.append(f"{self.name}: a stream on {ledger.thread_id} sent no metadata")
        return run_id, last_id, before

    async def resend_after_drop(self) -> None:
        """Send a message and hang up before any answer; then send it again until it is accepted."""
        ledger = self.thread()
        content = self.content()
        await post_and_hang_up(self.bases[self.replica()], ledger.thread_id, content, self.tokens())
        self.tally.add("run (stream)", None)
        ledger.maybe[content] += 1
        for refused in range(40):  # not polling: a client's resend policy after a 409
            outcome = await self.stream_run(self.clients[self.replica()], ledger, content)
            if outcome != "409":
                waited = "after 409" if refused else "at once"
                self.outcomes[f"resend after drop: {outcome} {waited}"] += 1
                return
            await asyncio.sleep(0.25)  # not polling: a client's back-off; the dropped send may still hold the thread
        self.problems.append(f"{self.name}: thread {ledger.thread_id} stayed busy for 10 s after a dropped send")

    # Reads, feedback, deletion, erasure ---------------------------------------------------

    async def transcript(self, thread_id: str, replica: int | None = None) -> list[TranscriptMessage]:
        """Page through a whole transcript (newest page first) and return it oldest first."""
        client = self.clients[self.replica() if replica is None else replica]
        limit = self.rng.choice([3, 7, 20, 50])
        pages: list[list[TranscriptMessage]] = []
        before: str | None = None
        while True:
            page = await client.messages(thread_id, limit=limit, before=before)
            pages.append(page.messages)
            if not page.has_more:
                break
            if not page.messages or page.next_before != page.messages[0].id:
                self.problems.append(f"{self.name}: page of {thread_id} points past its own oldest message")
            before = page.next_before
        return [m for page in reversed(pages) for m in page]

    async def page(self) -> None:
        """Read a thread page by page and check it against the ledger mid-soak."""
        live = [t for t in self.live() if t.acked]
        if not live:
            return await self.run_stream()
        await self.check(self.rng.choice(live), self.midway)
        self.outcomes["page: checked"] += 1

    async def check(self, ledger: ThreadLedger, into: Verdict, replica: int | None = None) -> None:
        """Read a thread's whole transcript and check it against the ledger."""
        into.add(check_transcript(ledger, await self.transcript(ledger.thread_id, replica)))

    async def feedback(self) -> None:
        """Rate an answered run of a live thread."""
        rated = [(t, run) for t in self.live() for run in t.answers]
        if not rated:
            return await self.run_stream()
        ledger, run_id = self.rng.choice(rated)
        comment = self.rng.choice([None, "helpful", "not what I asked"])
        score: Any = self.rng.choice(["up", "down"])
        await self.clients[self.replica()].feedback(ledger.thread_id, run_id, score, comment)
        self.outcomes["feedback: 204"] += 1

    async def memory_read(self) -> None:
        """Read the user's memory: only this user's facts, none from before its last erasure."""
        memory = await self.clients[self.replica()].memory()
        if memory.user_id != self.user:
            self.problems.append(f"{self.name}: memory answered for user {memory.user_id}")
        self.remembered_seen += self.check_facts([fact.text for fact in memory.facts])
        self.outcomes["memory read: 200"] += 1

    def check_facts(self, texts: list[str]) -> int:
        """Fail on a fact of another user or of a generation an erasure ended; return the facts marked."""
        marked = 0
        for text in texts:
            for index, generation in MARKER.findall(text):
                marked += 1
                if int(index) != self.index:
                    self.problems.append(f"{self.name}: memory holds a fact of virtual user {index}")
                elif int(generation) < self.generation:
                    self.problems.append(f"{self.name}: a fact from before erasure {generation} came back")
        return marked

    async def delete_thread(self) -> None:
        """Delete a live thread (refused while a dropped send still runs on it)."""
        live = self.live()
        if not live:
            return await self.run_stream()
        ledger = self.rng.choice(live)
        if ledger.acked:
            await self.check(ledger, self.checked)  # its last chance: afterwards it must be 404
        try:
            await self.clients[self.replica()].delete_thread(ledger.thread_id)
        except ConflictError:
            self.outcomes["delete thread: 409"] += 1
            return
        ledger.gone = "deleted"
        self.outcomes["delete thread: 204"] += 1

    async def erase(self) -> None:
        """Erase the user: every thread must be gone, and nothing remembered before may come back."""
        live = self.live()
        for ledger in live:
            if ledger.acked:
                await self.check(ledger, self.checked)  # their last chance: afterwards they must be 404
        try:
            report = await self.clients[self.replica()].erase_user()
        except ConflictError:
            self.outcomes["erase user: 409"] += 1
            return
        known = sum(1 for t in live if t.acked)
        possible = sum(1 for t in live if t.acked or t.maybe)
        if not known <= report.threads_deleted <= possible:
            self.problems.append(
                f"{self.name}: erasure deleted {report.threads_deleted} threads, expected {known} to {possible}"
            )
        for ledger in live:
            ledger.gone = "erased"
        self.generation += 1
        self.outcomes["erase user: 200"] += 1
