"""Service tokens: a fixed string, a callable that returns one, or HS256 tokens minted here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import jwt

TokenSource = str | Callable[[], str]

# A minted token is replaced this long before it expires, so a request never carries one
# that expires in flight (the service allows 5 s of clock skew, not more).
_RENEW_MARGIN_SECONDS = 60


class MintedTokens:
    """Mint HS256 service tokens with the claims the service verifies; reuse one until near expiry."""

    def __init__(
        self,
        secret: str,
        *,
        tenant_id: str,
        user_id: str,
        locale: str | None = None,
        issuer: str = "main-backend",
        audience: str = "chatbot-agent",
        ttl_seconds: int = 600,
    ) -> None:
        self._secret = secret
        self._claims: dict[str, str] = {"iss": issuer, "aud": audience, "tenant_id": tenant_id, "user_id": user_id}
        if locale is not None:
            self._claims["locale"] = locale
        self._ttl = ttl_seconds
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()  # the sync client may be shared by threads

    def __call__(self) -> str:
        """Return a token valid for at least another minute."""
        with self._lock:
            now = time.time()
            if self._token is None or now > self._expires - _RENEW_MARGIN_SECONDS:
                issued = int(now)
                claims: dict[str, str | int] = {**self._claims, "iat": issued, "exp": issued + self._ttl}
                self._token = jwt.encode(claims, self._secret, algorithm="HS256")
                self._expires = issued + self._ttl
            return self._token


def token_source(
    token: TokenSource | None,
    *,
    secret: str | None,
    tenant_id: str | None,
    user_id: str | None,
    locale: str | None,
    issuer: str,
    audience: str,
) -> Callable[[], str]:
    """Return a callable giving the bearer token of each request, from the constructor's arguments."""
    if token is not None:
        if secret is not None:
            raise ValueError("pass either token or secret, not both")
        return token if callable(token) else (lambda: token)
    if secret is None or tenant_id is None or user_id is None:
        raise ValueError("pass token=..., or secret=..., tenant_id=... and user_id=... to mint tokens")
    return MintedTokens(secret, tenant_id=tenant_id, user_id=user_id, locale=locale, issuer=issuer, audience=audience)


def user_of(token: str) -> str:
    """Return the `user_id` claim of a token without verifying it (the service does that)."""
    claims = jwt.decode(token, options={"verify_signature": False})
    user = claims.get("user_id")
    if not isinstance(user, str):
        raise ValueError("the service token carries no user_id claim")
    return user
