"""Service-token verification: `Authorization: Bearer <JWT>` -> `CallerContext`.

Runs as ASGI middleware on `/v1/` so that a bad token answers 401 before the body is
parsed: the contract ranks 401 above 422.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import jwt
from fastapi import Depends, Path, Request
from pydantic import JsonValue
from starlette.types import ASGIApp, Receive, Scope, Send

from chatbot import ids
from chatbot.caller import CallerContext, is_caller_id
from chatbot.config import Settings
from chatbot.errors import Problem, problem_response, unauthorized

# Token ids follow the one rule in caller.py (`is_caller_id`), which the CLI checks too.
_LOCALE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,4}")
DEFAULT_LOCALE = "fa-IR"
_REQUIRED = ["exp", "iat", "iss", "aud", "tenant_id", "user_id"]


class TokenVerifier:
    """Verify service tokens with the configured key: RS256 public key, else HS256 secret."""

    def __init__(self, settings: Settings) -> None:
        if settings.jwt_public_key:
            self._key: Any = settings.jwt_public_key
            self._algorithm = "RS256"
        elif settings.service_secret is not None:
            self._key = settings.service_secret.get_secret_value()
            self._algorithm = "HS256"
        else:
            self._key, self._algorithm = None, "HS256"
        self._issuer = settings.jwt_issuer
        self._audience = settings.jwt_audience
        self._max_lifetime = settings.jwt_max_lifetime_seconds

    def verify(self, authorization: str | None) -> CallerContext:
        """Return the caller named by a valid token, or raise a 401 `Problem`."""
        if not authorization:
            raise unauthorized("missing bearer token")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("malformed authorization header")
        if self._key is None:
            raise unauthorized("no token key configured")
        try:
            claims = jwt.decode(
                token.strip(),
                self._key,
                algorithms=[self._algorithm],  # one algorithm only: no alg=none, no HS/RS confusion
                audience=self._audience,
                issuer=self._issuer,
                options={"require": _REQUIRED},
                leeway=5,
            )
        except jwt.ExpiredSignatureError:
            raise unauthorized("token expired") from None
        except jwt.InvalidTokenError:
            raise unauthorized("invalid token") from None
        # PyJWT has checked that both convert with int() (it accepts "123" too); a token minted
        # to live longer than the maximum is refused even while young.
        if int(claims["exp"]) - int(claims["iat"]) > self._max_lifetime:
            raise unauthorized("token lifetime too long")
        return _caller_from_claims(claims)


def _caller_from_claims(claims: dict[str, JsonValue]) -> CallerContext:
    tenant_id, user_id = claims.get("tenant_id"), claims.get("user_id")
    for value in (tenant_id, user_id):
        if not is_caller_id(value):
            raise unauthorized("invalid tenant_id or user_id claim")
    locale = claims.get("locale", DEFAULT_LOCALE)
    if locale is None:
        locale = DEFAULT_LOCALE
    if not isinstance(locale, str) or not _LOCALE.fullmatch(locale):
        raise unauthorized("invalid locale claim")
    return CallerContext(ids.TenantId(str(tenant_id)), ids.UserId(str(user_id)), locale=locale.replace("_", "-"))


class ServiceAuthMiddleware:
    """Authenticate every `/v1/` request; put the caller in `request.state.caller`."""

    def __init__(self, app: ASGIApp, verifier: TokenVerifier, prefix: str = "/v1/") -> None:
        self.app = app
        self.verifier = verifier
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        try:
            caller = self.verifier.verify(header)
        except Problem as problem:
            response = problem_response(problem.status, problem.detail, headers=problem.headers)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)


async def current_caller(request: Request) -> CallerContext:
    """Return the authenticated caller of this request."""
    caller = getattr(request.state, "caller", None)
    if caller is None:  # a route outside /v1/ asked for a caller: a wiring bug, not a client error
        raise unauthorized("missing bearer token")
    return caller


CallerDep = Annotated[CallerContext, Depends(current_caller)]

# The user routes (`/v1/users/{user_id}...`, memory/ and ops/) act only on the token's own user.
# Any other user than the token's is a 403, whatever its spelling: no pattern check here.
UserId = Annotated[
    ids.UserId, Path(min_length=1, max_length=512, description="Must be the token's `user_id` (else 403).")
]


def require_self(user_id: ids.UserId, caller: CallerContext) -> None:
    """Refuse (403) a call about another user than the token's."""
    if user_id != caller.user_id:
        raise Problem(403, "a token may only read or change its own user's data")
