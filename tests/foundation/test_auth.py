"""Service authentication, as the backend sees it over HTTP."""

from __future__ import annotations

import base64
import json
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fixtures.app import running_app
from tests.fixtures.tokens import make_token

MEMORY = "/v1/users/u1/memory"


def _rsa_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def _unsigned(claims: dict[str, object]) -> str:
    def b64(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims)}."


def _claims() -> dict[str, object]:
    now = int(time.time())
    return {
        "iss": "main-backend",
        "aud": "chatbot-agent",
        "iat": now,
        "exp": now + 60,
        "tenant_id": "acme",
        "user_id": "u1",
    }


PRIVATE, PUBLIC = _rsa_pair()

BAD_HS256 = {
    "no header": None,
    "not bearer": "Basic dXNlcjpwYXNz",
    "malformed": "Bearer not.a.jwt",
    "empty bearer": "Bearer ",
    "alg none": f"Bearer {_unsigned(_claims())}",
    "wrong signature": f"Bearer {make_token(secret='another-secret-' + 'z' * 40)}",
    "expired": f"Bearer {make_token(exp=int(time.time()) - 600, iat=int(time.time()) - 900)}",
    "wrong iss": f"Bearer {make_token(iss='someone-else')}",
    "wrong aud": f"Bearer {make_token(aud='another-service')}",
    "missing tenant_id": f"Bearer {make_token(drop=('tenant_id',))}",
    "missing user_id": f"Bearer {make_token(drop=('user_id',))}",
    "missing exp": f"Bearer {make_token(drop=('exp',))}",
    "missing iat": f"Bearer {make_token(drop=('iat',))}",
    "dot in user_id": f"Bearer {make_token(user='user.1')}",
    "empty tenant_id": f"Bearer {make_token(tenant='')}",
    "too long user_id": f"Bearer {make_token(user='u' * 129)}",
    "numeric user_id": f"Bearer {make_token(user_id=42)}",  # as a claim: `user` takes a str
    "RS256 token on HS256 config": f"Bearer {jwt.encode(_claims(), PRIVATE, algorithm='RS256')}",
}


@pytest.mark.parametrize("header", list(BAD_HS256.values()), ids=list(BAD_HS256))
async def test_bad_tokens_get_401_with_bearer_challenge(client: httpx.AsyncClient, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = await client.get(MEMORY, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == 401 and set(body) >= {"type", "title", "status", "detail"}


async def test_valid_token_reaches_the_endpoint(client: httpx.AsyncClient) -> None:
    response = await client.get(MEMORY, headers={"Authorization": f"Bearer {make_token()}"})
    assert response.status_code == 200
    assert response.json()["user_id"] == "u1"


async def test_rs256_configuration_accepts_rs256_and_refuses_hs256(migrated_database_url: str) -> None:
    async with running_app(migrated_database_url, jwt_public_key=PUBLIC) as rs_client:
        good = await rs_client.get(
            MEMORY, headers={"Authorization": f"Bearer {jwt.encode(_claims(), PRIVATE, algorithm='RS256')}"}
        )
        assert good.status_code == 200
        hs = await rs_client.get(MEMORY, headers={"Authorization": f"Bearer {make_token()}"})
        assert hs.status_code == 401
        assert hs.headers["www-authenticate"] == "Bearer"


async def test_health_endpoints_need_no_token(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 200
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200  # what it counts: tests/foundation/test_metrics.py
