"""The ids a call names, each a type of its own: a function taking two cannot have them swapped.

All four are strings on the wire and in Postgres; `NewType` costs nothing at run time and
makes mypy refuse a `UserId` where a `TenantId` is due (tests/foundation/test_ids.py shows it).
An id becomes one of these where it enters: the verified token (`auth.py`: tenant and user),
a path parameter (`threads/schemas.py`: thread and run), a new run or thread, a row read back.
"""

from __future__ import annotations

from typing import NewType

TenantId = NewType("TenantId", str)
"""The tenant a token names: the isolation boundary of every table and namespace."""
UserId = NewType("UserId", str)
"""A user of one tenant, as the token names them."""
ThreadId = NewType("ThreadId", str)
"""A conversation: the checkpointer's thread."""
RunId = NewType("RunId", str)
"""One run of the graph on a thread (a UUID)."""
