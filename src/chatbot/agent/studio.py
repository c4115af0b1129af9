"""The graph as LangGraph's own dev server opens it (`langgraph dev`, see langgraph.json).

Offline model, the demo knowledge base searched in memory, no Postgres: what an agent
tuner needs to step through the nodes in LangGraph Studio. The dev server brings its own
checkpointer and store. The service itself never imports this module.
"""

# No `from __future__ import annotations` here: the dev server may execute this file by
# path without registering it in sys.modules, and dataclasses then cannot resolve string
# annotations (StudioContext below).
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from chatbot.agent.collaborators import AgentDeps
from chatbot.agent.context import Context
from chatbot.agent.graph import build_graph
from chatbot.caller import CallerContext
from chatbot.ids import RunId, TenantId, ThreadId, UserId
from chatbot.responses import QuotedChunk
from chatbot.retrieval.chunking import document_title, split_document
from chatbot.retrieval.normalize import detect_language, search_form

# The repository's demo knowledge base (absent from an installed wheel: then nothing is found).
DEMO_KNOWLEDGE = Path(__file__).resolve().parents[3] / "knowledge" / "demo"
_WORD = re.compile(r"\w{3,}")
MIN_SHARE = 0.3  # of the question's words a chunk must contain to be offered
TOP = 3


_TENANT_ID, _USER_ID = TenantId("acme"), UserId("studio-user")
_RUN_ID, _THREAD_ID = RunId("studio-run"), ThreadId("studio-thread")


@dataclass(frozen=True, kw_only=True)
class StudioContext(Context):
    """The caller and run of a Studio invocation, prefilled so a bare message runs."""

    tenant_id: TenantId = _TENANT_ID
    """Tenant of the Studio session."""

    user_id: UserId = _USER_ID
    """User whose memory the Studio session reads and writes (in the dev server's store)."""

    locale: str = "en-US"
    """`fa-IR` for Persian answers."""

    run_id: RunId = _RUN_ID
    """A fixed run id: Studio runs are not recorded by the service."""

    thread_id: ThreadId = _THREAD_ID
    """A fixed thread id (the dev server keeps its own threads)."""


def _words(text: str) -> set[str]:
    return set(_WORD.findall(search_form(text)))


@cache
def _demo_chunks(root: Path) -> tuple[tuple[QuotedChunk, frozenset[str]], ...]:
    """Return the demo knowledge base's chunks, each with the words it holds."""
    chunks: list[tuple[QuotedChunk, frozenset[str]]] = []
    for path in sorted(root.rglob("*.md")) if root.is_dir() else []:
        text = path.read_text(encoding="utf-8")
        document_id = path.relative_to(root).as_posix()
        for chunk in split_document(document_id, document_title(text, path.stem), text):
            quoted = QuotedChunk(
                chunk_id=chunk.chunk_id,
                document_id=document_id,
                title=chunk.title,
                text=chunk.text,
                language=detect_language(chunk.text),
            )
            chunks.append((quoted, frozenset(_words(f"{chunk.title} {chunk.text}"))))
    return tuple(chunks)


def demo_retriever(root: Path = DEMO_KNOWLEDGE) -> Any:
    """Return a retriever over a folder of Markdown files, ranked by the share of question words a chunk has."""

    async def retrieve(caller: CallerContext, question: str) -> Sequence[QuotedChunk]:
        asked = _words(question)
        if not asked:
            return []
        scored = []
        for chunk, words in _demo_chunks(root):
            share = len(asked & words) / len(asked)
            if share >= MIN_SHARE:
                scored.append(chunk.model_copy(update={"score": share}))
        scored.sort(key=lambda c: c.score, reverse=True)
        return scored[:TOP]

    return retrieve


def make_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build the conversational graph for `langgraph dev`: offline model, in-memory demo knowledge."""
    builder = build_graph(AgentDeps(retriever=demo_retriever()))
    builder.context_schema = StudioContext  # Studio's context form starts filled in
    return builder.compile()
