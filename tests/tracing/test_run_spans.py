"""A traced run: one run span, a span per graph node and per model call, linked, and no text in any of them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from langchain_core.messages import BaseMessage
from opentelemetry.trace import StatusCode

from chatbot.memory.extraction import MemoryCandidates
from chatbot.memory.jobs import MemoryJob
from chatbot.memory.writer import offline_extractor
from tests.fixtures.app import running_app
from tests.fixtures.messages import send_for_events
from tests.fixtures.models import ProviderErrorChatModel, ScriptedChatModel, StreamingChatModel
from tests.fixtures.sse import parse_sse
from tests.fixtures.tokens import auth
from tests.fixtures.wait import wait_until
from tests.tracing.spans import (
    NODES,
    STEPS,
    by_name,
    children,
    everything_said,
    leaks,
    memory_provider,
    run_span,
    steps_of,
)

EN = {"locale": "en-US"}
ANSWER = "Medical costs abroad are covered up to the limit on your travel policy schedule."


class NamedStreamingModel(StreamingChatModel):
    """A streaming scripted model that names itself, as provider models do (`ls_model_name`)."""

    model_name: str = "scripted-gpt"


class NamedFailingModel(ProviderErrorChatModel):
    """A model whose provider answers 429 with a message quoting the user."""

    model_name: str = "scripted-gpt"


async def test_a_run_is_a_span_with_a_child_per_node_and_a_model_span_under_generate(kb_database_url: str) -> None:
    provider, exporter = memory_provider()
    model = NamedStreamingModel(mode="answer", reply={"status": "answered", "answer": ANSWER, "citations": []})
    windows: list[Sequence[BaseMessage]] = []
    overrides = {"chat_model": model, "window_observer": windows.append}
    async with running_app(kb_database_url, agent_overrides=overrides, tracer_provider=provider) as client:
        remember = "remember that my car is a Peugeot 206, and what covers windscreens?"
        first = await send_for_events(client, "traced-1", remember, **EN)
        abroad = "What does travel insurance cover for medical costs abroad?"
        second = await send_for_events(client, "traced-1", abroad, **EN)
        memory = (await client.get("/v1/users/u1/memory", headers=auth(**EN))).json()
    spans = exporter.get_finished_spans()

    for events in (first, second):
        end = events[-1][1]
        assert events[-1][0] == "end" and end["status"] == "answered"
        root = run_span(spans, end["run_id"])
        assert root.parent is None
        assert root.attributes is not None
        assert root.attributes["chatbot.thread_id"] == "traced-1"
        assert root.attributes["chatbot.tenant_id"] == "acme"
        assert root.attributes["chatbot.status"] == "answered"
        assert root.status.status_code != StatusCode.ERROR
        ttft = root.attributes["chatbot.ttft_ms"]
        assert isinstance(ttft, float) and 0 <= ttft <= (root.end_time - root.start_time) / 1e6  # type: ignore[operator]

        nodes = children(spans, root)
        assert steps_of(nodes) == STEPS
        for node in nodes:
            assert node.context.trace_id == root.context.trace_id
            assert root.start_time <= node.start_time <= node.end_time <= root.end_time  # type: ignore[operator]
            assert (node.attributes or {})["chatbot.status"] == "ok"
        # The first step's two reads may overlap; every later node starts after all before it ended.
        for i, later in enumerate(nodes[2:], start=2):
            assert max(n.end_time for n in nodes[:i]) <= later.start_time  # type: ignore[type-var,operator]

        generate = by_name(nodes, "generate")
        model_spans = children(spans, generate)
        assert [m.name for m in model_spans] == ["chat scripted-gpt"]
        call = model_spans[0]
        assert call.attributes is not None
        assert call.attributes["gen_ai.request.model"] == "scripted-gpt"
        assert call.attributes["chatbot.status"] == "ok"
        assert generate.start_time <= call.start_time <= call.end_time <= generate.end_time  # type: ignore[operator]
        for other in nodes:
            if other is not generate:
                assert children(spans, other) == []

    # Nothing the user said, the model saw (system prompt, chunk text, memory) or answered.
    assert memory["facts"] or memory["profile"], "the first run should have left something remembered"
    texts = [ANSWER, first[-1][1]["message"]["content"], second[-1][1]["message"]["content"]]
    texts += [str(m.content) for window in windows for m in window]
    texts += [str(f["text"]) for f in memory["facts"]] + [str(v) for v in memory["profile"].values()]
    assert any("€" in t or "abroad" in t for t in texts[3:]), "the windows should hold the retrieved chunks"
    said = everything_said(spans)
    assert leaks(texts, said) == []
    assert all(not span.events for span in spans)


async def test_a_run_sent_with_a_traceparent_joins_the_backends_trace(kb_database_url: str) -> None:
    provider, exporter = memory_provider()
    model = NamedStreamingModel(mode="answer", reply={"status": "answered", "answer": ANSWER, "citations": []})
    trace_id, backend_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    message = {"message": {"content": "What does travel insurance cover for medical costs abroad?"}}
    async with running_app(kb_database_url, agent_overrides={"chat_model": model}, tracer_provider=provider) as client:
        joined = await client.post(
            "/v1/threads/traced-joined/runs",
            json=message,
            headers={**auth(**EN), "traceparent": f"00-{trace_id}-{backend_span}-01", "tracestate": "backend=7"},
        )
        malformed = await client.post(
            "/v1/threads/traced-malformed/runs", json=message, headers={**auth(**EN), "traceparent": "00-not-a-trace"}
        )
    assert joined.status_code == 200 and malformed.status_code == 200, (joined.text, malformed.text)
    spans = exporter.get_finished_spans()

    root = run_span(spans, parse_sse(joined.text)[-1][1]["run_id"])
    assert root.parent is not None and root.parent.is_remote
    assert root.parent.span_id == int(backend_span, 16)
    assert root.context.trace_id == int(trace_id, 16)
    assert root.context.trace_state.get("backend") == "7"
    nodes = children(spans, root)
    assert steps_of(nodes) == STEPS
    assert {n.context.trace_id for n in nodes} == {int(trace_id, 16)}

    # A header that is not W3C trace context starts a trace of the run's own, as without one.
    alone = run_span(spans, parse_sse(malformed.text)[-1][1]["run_id"])
    assert alone.parent is None
    assert alone.context.trace_id != int(trace_id, 16)


async def test_a_failed_model_call_marks_the_model_node_and_run_spans_with_error_classes(
    kb_database_url: str,
) -> None:
    provider, exporter = memory_provider()
    question = "Please check whether claim number 55512 for my Peugeot 206 was accepted"
    model = NamedFailingModel(status_code=429, error_message=f"rate limited while answering: {question}")
    async with running_app(kb_database_url, agent_overrides={"chat_model": model}, tracer_provider=provider) as client:
        events = await send_for_events(client, "traced-fail", question, **EN)
    # A provider's 429 is a rate limit: 503 model_rate_limited (docs/api.md).
    assert events[-1][0] == "error" and events[-1][1]["status"] == 503
    spans = exporter.get_finished_spans()
    root = run_span(spans, events[0][1]["run_id"])
    assert root.attributes is not None
    assert root.attributes["chatbot.status"] == "error"
    assert root.attributes["error.type"] == "ModelFailure"
    assert root.status.status_code == StatusCode.ERROR
    assert "chatbot.ttft_ms" not in root.attributes  # no token went out

    nodes = children(spans, root)
    assert steps_of(nodes) == STEPS[:2]  # nothing after the failure
    generate = by_name(nodes, "generate")
    # The node records the failure as the run's outcome: its span names the reason.
    assert (generate.attributes or {})["error.type"] == "model_rate_limited"
    assert generate.status.status_code == StatusCode.ERROR
    (call,) = children(spans, generate)
    assert call.attributes is not None
    assert call.attributes["error.type"] == "ProviderHTTPError"
    assert call.attributes["http.response.status_code"] == 429
    assert call.attributes["chatbot.status"] == "error"
    # The provider's message quotes the user: it must not reach a span (no recorded exception).
    assert leaks([question, model.error_message], everything_said(spans)) == []
    assert all(not span.events for span in spans)


async def test_concurrent_runs_get_separate_traces(kb_database_url: str) -> None:
    provider, exporter = memory_provider()
    model = NamedStreamingModel(mode="answer", reply={"status": "answered", "answer": ANSWER, "citations": []})
    async with running_app(kb_database_url, agent_overrides={"chat_model": model}, tracer_provider=provider) as client:
        results = await asyncio.gather(
            *(
                send_for_events(client, f"traced-many-{i}", "What does travel insurance cover abroad?", **EN)
                for i in range(4)
            )
        )
    spans = exporter.get_finished_spans()
    roots = [run_span(spans, events[-1][1]["run_id"]) for events in results]
    assert len({r.context.trace_id for r in roots}) == 4
    for root in roots:
        nodes = children(spans, root)
        assert steps_of(nodes) == STEPS
        assert all(n.context.trace_id == root.context.trace_id for n in nodes)
        assert len(children(spans, by_name(nodes, "generate"))) == 1
    assert len(spans) == 4 * (1 + len(NODES) + 1)


async def test_a_model_that_times_out_ends_its_spans_as_failed(kb_database_url: str) -> None:
    provider, exporter = memory_provider()
    overrides = {"chat_model": ScriptedChatModel(mode="hang"), "model_timeout_seconds": 0.3}
    async with running_app(kb_database_url, agent_overrides=overrides, tracer_provider=provider) as client:
        events = await send_for_events(client, "traced-timeout", "What does travel insurance cover abroad?", **EN)
    assert events[-1][0] == "error" and events[-1][1]["status"] == 504
    spans = exporter.get_finished_spans()
    root = run_span(spans, events[0][1]["run_id"])
    assert (root.attributes or {})["error.type"] == "ModelTimeout"
    generate = children(spans, root)[-1]
    assert generate.name == "generate" and (generate.attributes or {})["error.type"] == "model_timeout"
    (call,) = children(spans, generate)
    assert call.status.status_code == StatusCode.ERROR and (call.attributes or {})["chatbot.status"] == "error"
    assert call.end_time is not None and call.end_time <= root.end_time  # type: ignore[operator]


@pytest.mark.parametrize("run_ended", [False, True], ids=["run-still-open", "run-ended"])
async def test_the_memory_writers_model_call_after_the_answer_is_not_in_the_runs_trace(
    kb_database_url: str, run_ended: bool
) -> None:
    # The memory worker is a task started inside `write_memory`: it inherits the run's
    # callbacks, and its model call comes after that node ended, the run still open or not.
    provider, exporter = memory_provider()
    extracted = asyncio.Event()
    side_model = NamedStreamingModel(mode="answer", reply={"status": "answered", "answer": "x", "citations": []})

    def run_span_ended(run_id: str) -> bool:
        return any(
            s.name == "chatbot.run" and (s.attributes or {}).get("chatbot.run_id") == run_id
            for s in exporter.get_finished_spans()
        )

    async def extractor(job: MemoryJob) -> MemoryCandidates:
        if run_ended:
            await wait_until(lambda: run_span_ended(job.run_id), what="the run's span to end")
        await side_model.with_structured_output({"title": "Fact", "type": "object"}).ainvoke("extract")
        extracted.set()
        return await offline_extractor(job)

    model = NamedStreamingModel(mode="answer", reply={"status": "answered", "answer": ANSWER, "citations": []})
    async with running_app(
        kb_database_url, agent_overrides={"chat_model": model}, memory_extractor=extractor, tracer_provider=provider
    ) as client:
        events = await send_for_events(
            client, f"traced-memory-{int(run_ended)}", "remember that my car is a Peugeot 206", **EN
        )
        await asyncio.wait_for(extracted.wait(), 10)
    spans = exporter.get_finished_spans()
    root = run_span(spans, events[-1][1]["run_id"])
    model_spans = [s for s in spans if s.name.startswith("chat ")]
    (generate,) = [n for n in children(spans, root) if n.name == "generate"]
    assert model_spans == children(spans, generate)  # the answer's call only
    assert len(spans) == 1 + len(NODES) + 1
