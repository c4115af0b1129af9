"""langgraph.json opens the conversational graph in LangGraph's dev server with the offline model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

ROOT = Path(__file__).resolve().parents[2]


def load_graph_factory() -> Any:
    """Import the graph named in langgraph.json the way the dev server does: by file path."""
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert config["dependencies"] == ["."]
    target = config["graphs"]["chatbot"]
    file, _, attribute = target.partition(":")
    spec = importlib.util.spec_from_file_location("studio_graph", ROOT / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attribute)


async def test_the_studio_graph_answers_an_offline_turn_from_the_demo_knowledge() -> None:
    graph = load_graph_factory()()
    graph.checkpointer = InMemorySaver()
    config = {"configurable": {"thread_id": "studio-1"}}
    question = "What does travel insurance cover for medical costs abroad?"
    state = await graph.ainvoke({"messages": [{"role": "user", "content": question}]}, config, context={})
    outcome = state["outcome"]
    assert outcome["status"] == "answered"
    assert len(outcome["citations"]) == 1 and outcome["citations"][0].startswith("en/travel.md#")
    assert "€50,000" in state["messages"][-1].content  # the chunk quoted, figures and all

    persian = "بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟"
    state = await graph.ainvoke(
        {"messages": [{"role": "user", "content": persian}]}, config, context={"locale": "fa-IR"}
    )
    assert state["outcome"]["status"] == "answered"
    assert state["outcome"]["citations"][0].startswith("fa/")
    assert len([m for m in state["messages"] if m.type == "human"]) == 2  # one thread, kept by the saver
