"""Tokens may live at most CHATBOT_JWT_MAX_LIFETIME_SECONDS from `iat` to `exp`."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.fixtures.app import running_app
from tests.fixtures.tokens import make_token

MEMORY = "/v1/users/u1/memory"


def _bearer(lifetime: int, *, issued_ago: int = 0, **claims: Any) -> dict[str, str]:
    iat = int(time.time()) - issued_ago
    return {"Authorization": f"Bearer {make_token(iat=iat, exp=iat + lifetime, **claims)}"}


@pytest.mark.parametrize("lifetime", [3601, 24 * 3600, 10 * 365 * 24 * 3600], ids=["1h+1s", "1 day", "10 years"])
async def test_tokens_living_longer_than_the_maximum_get_401(client: httpx.AsyncClient, lifetime: int) -> None:
    response = await client.get(MEMORY, headers=_bearer(lifetime))
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["status"] == 401


@pytest.mark.parametrize("lifetime", [60, 3600], ids=["1 minute", "exactly the maximum"])
async def test_tokens_within_the_maximum_are_accepted(client: httpx.AsyncClient, lifetime: int) -> None:
    assert (await client.get(MEMORY, headers=_bearer(lifetime))).status_code == 200


async def test_a_long_lived_token_is_refused_however_much_of_it_is_left(client: httpx.AsyncClient) -> None:
    # Issued two days ago, expiring in a minute: young or old, it was minted to live too long.
    response = await client.get(MEMORY, headers=_bearer(2 * 24 * 3600 + 60, issued_ago=2 * 24 * 3600))
    assert response.status_code == 401


async def test_numeric_strings_in_iat_and_exp_are_judged_by_their_value(client: httpx.AsyncClient) -> None:
    now = int(time.time())
    long_lived = {"Authorization": f"Bearer {make_token(iat=str(now), exp=str(now + 7200))}"}
    assert (await client.get(MEMORY, headers=long_lived)).status_code == 401
    short = {"Authorization": f"Bearer {make_token(iat=str(now), exp=str(now + 60))}"}
    assert (await client.get(MEMORY, headers=short)).status_code == 200


async def test_the_maximum_is_a_setting(migrated_database_url: str) -> None:
    async with running_app(migrated_database_url, jwt_max_lifetime_seconds=24 * 3600) as day_client:
        assert (await day_client.get(MEMORY, headers=_bearer(24 * 3600))).status_code == 200
        assert (await day_client.get(MEMORY, headers=_bearer(24 * 3600 + 1))).status_code == 401
