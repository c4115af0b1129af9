"""Driving the conversational graph once: the one loop that runs it and reads its outcome.

The run service (threads/runs.py, durably, with its events going to the caller) and the
evaluation's dry run (in memory) both run a turn through `run_graph`; what the run gave
comes back as a `RunResult` (agent/result.py), never raised.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

from chatbot.agent.context import Context
from chatbot.agent.outcome import outcome_of
from chatbot.agent.result import RunResult
from chatbot.agent.state import ConversationState


async def run_graph(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    graph_input: Any,
    config: RunnableConfig,
    context: Context,
    *,
    durability: Durability | None = None,
) -> RunResult:
    """Run `graph` to its end; return the run's result, with what it raised (a cancellation too).

    `graph_input` is the state to start from (None: go on from the thread's checkpoint).
    """
    result = context.result
    try:
        events = graph.astream(graph_input, config, context=context, stream_mode="updates", durability=durability)
        # `updates` mode: each chunk maps the node that ran to the state update it returned.
        async for update in cast(AsyncIterator[dict[str, ConversationState]], events):
            result.outcome = outcome_of(update) or result.outcome
        if result.outcome is None:
            raise RuntimeError("the graph ended without an outcome")
    except BaseException as exc:  # the caller decides: a cancel may be the user's or a shutdown
        result.raised = exc
    return result
