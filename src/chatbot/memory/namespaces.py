"""Store namespaces of a user's long-term memory: tenant first, always from the token."""

from __future__ import annotations

PROFILE_KEY = "profile"


def user_prefix(tenant_id: str, user_id: str) -> tuple[str, ...]:
    """Return the namespace prefix holding everything remembered about one user of one tenant."""
    return (tenant_id, "user", user_id)


def profile_namespace(tenant_id: str, user_id: str) -> tuple[str, ...]:
    """Return the namespace of the user's profile document (one item, key `profile`)."""
    return (*user_prefix(tenant_id, user_id), "profile")


def facts_namespace(tenant_id: str, user_id: str) -> tuple[str, ...]:
    """Return the namespace of the user's remembered facts (one item per fact)."""
    return (*user_prefix(tenant_id, user_id), "facts")
