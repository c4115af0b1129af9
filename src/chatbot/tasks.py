"""Background asyncio tasks: the one way a service stops the loop it started."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing was started) and wait until it has ended.

    The task's own `CancelledError` is swallowed: stopping it is what the caller asked for.
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
