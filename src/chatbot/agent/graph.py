"""The conversational graph builder; the app and the tests compile it with their saver and store."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.nodes import Nodes
from chatbot.agent.state import ConversationState


async def _route_by_status(state: ConversationState) -> str:
    # Only answered turns teach us something worth remembering about the user. Async though
    # it awaits nothing: LangGraph runs a plain function in a worker thread, a hop per run.
    return "write_memory" if state.get("outcome", {}).get("status") == "answered" else END


def build_graph(deps: AgentDeps) -> StateGraph[ConversationState, Context]:
    """Return the uncompiled graph: (load_memory | retrieve) -> generate -> (write_memory).

    Memory and knowledge are read side by side, in one step: neither needs the other, and
    the memory read then costs the run no time of its own (the retrieval is the longer).
    """
    nodes = Nodes(deps)
    graph: StateGraph[ConversationState, Context] = StateGraph(ConversationState, context_schema=Context)
    graph.add_node("load_memory", nodes.load_memory)
    graph.add_node("retrieve", nodes.retrieve)
    graph.add_node("generate", nodes.generate)
    graph.add_node("write_memory", nodes.write_memory)
    graph.add_edge(START, "load_memory")
    graph.add_edge(START, "retrieve")
    # Two plain edges, not a join: both run in the first step, so `generate` starts once
    # after both, without the join's barrier channel to write into every checkpoint.
    graph.add_edge("load_memory", "generate")
    graph.add_edge("retrieve", "generate")
    graph.add_conditional_edges("generate", _route_by_status, ["write_memory", END])
    graph.add_edge("write_memory", END)
    return graph
