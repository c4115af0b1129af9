"""Store namespaces of a user's long-term memory: tenant first, always from the token."""

from __future__ import annotations

from chatbot.ids import TenantId, UserId

PROFILE_KEY = "profile"
PROFILE_SOURCES_KEY = "sources"
"""The profile namespace's second item: which turns and facts each profile entry came from."""


def user_prefix(tenant_id: TenantId, user_id: UserId) -> tuple[str, ...]:
    """Return the namespace prefix holding everything remembered about one user of one tenant."""
    return (tenant_id, "user", user_id)


def profile_namespace(tenant_id: TenantId, user_id: UserId) -> tuple[str, ...]:
    """Return the namespace of the user's profile document (one item, key `profile`)."""
    return (*user_prefix(tenant_id, user_id), "profile")


def facts_namespace(tenant_id: TenantId, user_id: UserId) -> tuple[str, ...]:
    """Return the namespace of the user's remembered facts (one item per fact)."""
    return (*user_prefix(tenant_id, user_id), "facts")


def history_namespace(tenant_id: TenantId, user_id: UserId) -> tuple[str, ...]:
    """Return the namespace of the user's closed facts: versions a later fact of the same kind replaced."""
    return (*user_prefix(tenant_id, user_id), "facts_history")
