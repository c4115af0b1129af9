"""Property-based fuzzing over the OpenAPI document, with valid tokens, against a real replica.

Schemathesis builds requests from the app's own OpenAPI document: valid ones (positive)
and ones that break the schema (negative: wrong types, bad path parameters, odd headers,
bodies that are not the model). Every answer must be below 500, a status the document
lists for the operation, and, when it is an error, problem details that say the same status.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import httpx
import pytest
import requests
import schemathesis
from hypothesis import given, reject
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Err, Ok

from chatbot.app import create_app
from tests.fixtures.app import Replica
from tests.fixtures.postgres import settings_for
from tests.fixtures.tokens import make_token
from tests.hardening.fuzzing import FUZZ_SETTINGS, Tally, fuzz_replica

__all__ = ["fuzz_replica"]

USER = "u1"
# The document is the app's own; building it needs no database.
DOCUMENT: dict[str, Any] = create_app(settings_for("postgresql://unused@/unused")).openapi()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
T = TypeVar("T")
E = TypeVar("E", bound=Exception)


def _ok(result: Ok[T] | Err[E]) -> T:
    """The operation, or the error schemathesis found in its part of the document, raised."""
    if isinstance(result, Err):
        raise result.err()
    return result.ok()


OPERATIONS = {op.label: op for op in (_ok(result) for result in SCHEMA.get_all_operations())}
TALLY = Tally("OpenAPI fuzzer")


def _breakable(label: str) -> bool:
    """Whether the operation takes anything a negative case could break (parameters or a body)."""
    operation = DOCUMENT["paths"][OPERATIONS[label].path][OPERATIONS[label].method.lower()]
    return bool(operation.get("parameters") or operation.get("requestBody"))


# Valid cases of every operation; invalid ones where there is input to break (the health
# endpoints take none, so schemathesis has no negative case to make for them).
CASES = [(label, GenerationMode.POSITIVE) for label in sorted(OPERATIONS)] + [
    (label, GenerationMode.NEGATIVE) for label in sorted(OPERATIONS) if _breakable(label)
]


@pytest.fixture(scope="module", autouse=True)
def _print_tally() -> Iterator[None]:
    yield
    print(f"\n{TALLY.report()}")


def _header(response: Any, name: str) -> str:
    # Schemathesis keeps each header as a list of its values.
    values = response.headers.get(name) or [""]
    return str(values[0]) if isinstance(values, list) else str(values)


def _documented(method: str, path: str) -> set[int]:
    return {int(status) for status in DOCUMENT["paths"][path][method.lower()]["responses"]}


def _cases(label: str, mode: GenerationMode) -> st.SearchStrategy[Any]:
    operation = OPERATIONS[label]
    strategy = operation.as_strategy(generation_mode=mode)
    if "{user_id}" in operation.path:
        # Random user ids are all 403s; half the cases name the token's user to go deeper.
        strategy = st.one_of(strategy, operation.as_strategy(generation_mode=mode, path_parameters={"user_id": USER}))
    return strategy


def test_the_document_lists_every_operation() -> None:
    assert set(OPERATIONS) >= {
        "POST /v1/threads/{thread_id}/runs",
        "GET /v1/threads/{thread_id}/messages",
        "DELETE /v1/threads/{thread_id}",
        "POST /v1/threads/{thread_id}/runs/{run_id}/feedback",
        "GET /v1/users/{user_id}/memory",
        "DELETE /v1/users/{user_id}/memory",
        "DELETE /v1/users/{user_id}",
    }


def _case_id(case: tuple[str, GenerationMode]) -> str:
    return f"{case[0]}-{'valid' if case[1] is GenerationMode.POSITIVE else 'invalid'}"


@pytest.mark.parametrize(("label", "mode"), CASES, ids=[_case_id(case) for case in CASES])
def test_no_input_gets_a_5xx_or_an_undocumented_status(fuzz_replica: Replica, label: str, mode: GenerationMode) -> None:
    session = requests.Session()
    documented = _documented(OPERATIONS[label].method, OPERATIONS[label].path)

    @FUZZ_SETTINGS
    @given(case=_cases(label, mode))
    def check(case: Any) -> None:
        token = make_token(user=USER)
        try:
            response = case.call(
                base_url=fuzz_replica.base_url, session=session, headers={"Authorization": f"Bearer {token}"}
            )
        except (requests.exceptions.InvalidHeader, requests.exceptions.InvalidURL, UnicodeError):
            reject()  # the client library cannot send it: nothing reached the service
        TALLY.add(response.status_code)
        where = f"{case.method} {case.formatted_path} -> {response.status_code}"
        assert response.status_code < 500, where
        assert response.status_code in documented, where
        if response.status_code >= 400:
            assert _header(response, "content-type").startswith("application/problem+json"), where
            problem = response.json()
            assert problem["status"] == response.status_code, where
            assert {"type", "title", "status", "detail"} <= set(problem), where

    check()
    # The replica is still whole: it answers a plain request afterwards.
    assert httpx.get(f"{fuzz_replica.base_url}/healthz", timeout=10).status_code == 200
