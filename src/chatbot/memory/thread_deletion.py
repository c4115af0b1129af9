"""A deleted thread in memory: the user's facts stay, nothing in them names the thread any more.

Memory is the user's (docs/api.md), so deleting a thread keeps what its turns taught; what
names the thread goes: a fact's `source`, a closed version's `source` and `closed_by`
(memory/facts.py), and the profile's sources, kept as unnamed turns so the entries they gave
stay (memory/_profile_sources.py). Each item is parsed by the type that owns it and written
back from it. threads/deletion.py calls this in the deletion's transaction, after the
thread's memory jobs went, so no job of the thread writes a source again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg import AsyncConnection
from pydantic import JsonValue

from chatbot.ids import TenantId, ThreadId, UserId
from chatbot.memory import _profile_sources as profile_sources
from chatbot.memory import items
from chatbot.memory.facts import ClosedFact, Fact
from chatbot.memory.namespaces import PROFILE_SOURCES_KEY, facts_namespace, history_namespace, profile_namespace

# Any object anywhere in an item's value that names the thread: the statement finds the items
# to rewrite, the types below say what in them names it.
_NAMES_THREAD = "$.** ? (@.thread_id == $thread)"

Rewrite = Callable[[str, Mapping[str, JsonValue], ThreadId], Mapping[str, object] | None]


def _fact(key: str, value: Mapping[str, JsonValue], thread_id: ThreadId) -> Mapping[str, object]:
    return Fact.from_stored(value).without_thread(thread_id).stored()


def _closed(key: str, value: Mapping[str, JsonValue], thread_id: ThreadId) -> Mapping[str, object]:
    return ClosedFact.from_stored(value).without_thread(thread_id).stored()


def _profile(key: str, value: Mapping[str, JsonValue], thread_id: ThreadId) -> Mapping[str, object] | None:
    if key != PROFILE_SOURCES_KEY:
        return None  # the profile document itself names no turn
    return profile_sources.without_thread(profile_sources.stored_sources(value), thread_id)


async def drop_thread_sources(
    conn: AsyncConnection[Any], tenant_id: TenantId, user_id: UserId, thread_id: ThreadId
) -> int:
    """Take `thread_id` out of every memory item of the user that names it; return how many changed.

    One statement per namespace (each names one store prefix) finds the items, and each is
    rewritten by its key, in the caller's transaction.
    """
    areas: tuple[tuple[tuple[str, ...], Rewrite], ...] = (
        (facts_namespace(tenant_id, user_id), _fact),
        (history_namespace(tenant_id, user_id), _closed),
        (profile_namespace(tenant_id, user_id), _profile),
    )
    changed = 0
    for namespace, rewrite in areas:
        for item in await items.matching(conn, namespace, _NAMES_THREAD, {"thread": thread_id}):
            value = rewrite(item.key, item.value, thread_id)
            if value is not None:
                await items.replace_value(conn, namespace, item.key, value)
                changed += 1
    return changed
