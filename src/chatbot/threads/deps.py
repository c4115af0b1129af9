"""Typed dependencies of the threads feature: the run service and the run records.

Beside the feature rather than in `chatbot.deps`, which sits below every feature and so
cannot name their services without pointing up at them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from chatbot.threads.rejoin import RunRecords
from chatbot.threads.runs import RunService


async def app_runs(request: Request) -> RunService:
    """Return the run service."""
    runs: RunService = request.app.state.runs
    return runs


async def app_run_records(request: Request) -> RunRecords:
    """Return the reader of runs' final checkpoints (rejoins and replays)."""
    records: RunRecords = request.app.state.run_records
    return records


RunsDep = Annotated[RunService, Depends(app_runs)]
RecordsDep = Annotated[RunRecords, Depends(app_run_records)]
