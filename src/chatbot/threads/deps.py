"""Typed dependencies of the threads feature: the run service and the run records.

Beside the feature rather than in `chatbot.deps`, which sits below every feature and so
cannot name their services without pointing up at them.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends

from chatbot.deps import service
from chatbot.threads.rejoin import RunRecords
from chatbot.threads.runs import RunService


class ThreadServices(Protocol):
    """The part of the replica's services (`chatbot.services.Services`) this feature reads."""

    runs: RunService
    run_records: RunRecords


def _runs(services: ThreadServices) -> RunService:
    return services.runs


def _run_records(services: ThreadServices) -> RunRecords:
    return services.run_records


RunsDep = Annotated[RunService, Depends(service(_runs))]
RecordsDep = Annotated[RunRecords, Depends(service(_run_records))]
