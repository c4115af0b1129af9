"""Typed dependencies of the threads feature: the run service and the run records.

Beside the feature rather than in `chatbot.deps`, which sits below every feature and so
cannot name their services without pointing up at them.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends

from chatbot.deps import service
from chatbot.threads.rejoin import RunReplays
from chatbot.threads.runs import RunService


class ThreadServices(Protocol):
    """The part of the replica's services (`chatbot.services.Services`) this feature reads."""

    runs: RunService
    run_replays: RunReplays


def _runs(services: ThreadServices) -> RunService:
    return services.runs


def _run_replays(services: ThreadServices) -> RunReplays:
    return services.run_replays


RunsDep = Annotated[RunService, Depends(service(_runs))]
ReplaysDep = Annotated[RunReplays, Depends(service(_run_replays))]
