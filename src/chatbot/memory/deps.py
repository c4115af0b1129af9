"""Typed dependency of the memory feature: the replica's background memory writer.

Beside the feature rather than in `chatbot.deps`, which sits below every feature.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends

from chatbot.deps import service
from chatbot.memory.writer import MemoryWriter


class MemoryServices(Protocol):
    """The part of the replica's services (`chatbot.services.Services`) this feature reads."""

    memory: MemoryWriter


def _memory(services: MemoryServices) -> MemoryWriter:
    return services.memory


MemoryDep = Annotated[MemoryWriter, Depends(service(_memory))]
