"""Typed dependency of the memory feature: the replica's background memory writer.

Beside the feature rather than in `chatbot.deps`, which sits below every feature.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from chatbot.memory.writer import MemoryWriter


async def app_memory(request: Request) -> MemoryWriter:
    """Return the background memory writer."""
    memory: MemoryWriter = request.app.state.memory
    return memory


MemoryDep = Annotated[MemoryWriter, Depends(app_memory)]
