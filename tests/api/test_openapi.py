"""The OpenAPI document: valid, complete (every status the contract allows), with examples."""

from __future__ import annotations

import re
from typing import Any

import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate

from tests.api.openapi_doc import OPERATIONS, examples_of, is_persian, openapi_document, operations
from tests.fixtures.sse import parse_blocks

DOC = openapi_document()
OPERATION_IDS = [f"{method.upper()} {path}" for method, path, _ in operations(DOC)]


def _operation(key: str) -> tuple[tuple[str, str], dict[str, Any]]:
    method, path = key.split(" ", 1)
    return (method.lower(), path), DOC["paths"][path][method.lower()]


def test_the_document_is_valid_openapi_3_1() -> None:
    validate(DOC)
    assert DOC["openapi"].startswith("3.1")


def test_every_operation_is_in_the_contract_table_and_every_table_entry_is_served() -> None:
    served = {(method, path) for method, path, _ in operations(DOC)}
    assert served == set(OPERATIONS)


@pytest.mark.parametrize("key", OPERATION_IDS)
def test_each_operation_documents_every_status_it_can_answer(key: str) -> None:
    name, operation = _operation(key)
    expected = OPERATIONS[name]
    documented = {int(status) for status in operation["responses"]}
    missing = ({expected.success} | expected.errors) - documented
    assert not missing, f"{key} does not document {sorted(missing)}"


@pytest.mark.parametrize("key", OPERATION_IDS)
def test_error_responses_are_problem_documents_with_an_example(key: str) -> None:
    _, operation = _operation(key)
    for status, response in operation["responses"].items():
        if int(status) < 400:
            continue
        media = response["content"]["application/problem+json"]
        assert set(media["schema"]["properties"]) == {"type", "title", "status", "detail"}, (key, status)
        (example,) = examples_of(media)
        assert example["status"] == int(status)
        headers = response.get("headers", {})
        if int(status) in (429, 503) and key.startswith(("POST /v1", "GET /v1", "DELETE /v1")):
            assert "Retry-After" in headers, (key, status)
        if int(status) == 401:
            assert "WWW-Authenticate" in headers, key


@pytest.mark.parametrize("key", OPERATION_IDS)
def test_every_body_has_examples_and_text_bodies_have_english_and_persian_ones(key: str) -> None:
    name, operation = _operation(key)
    bodies = [("request", m) for m in operation.get("requestBody", {}).get("content", {}).values()]
    success = operation["responses"][str(OPERATIONS[name].success)]
    bodies += [("response", m) for m in success.get("content", {}).values()]
    if OPERATIONS[name].success == 200:
        assert success.get("content"), f"{key}: its 200 has no documented body"
    for kind, media in bodies:
        values = examples_of(media)
        assert values, f"{key}: a {kind} body without an example"
        if OPERATIONS[name].persian:
            assert any(is_persian(v) for v in values), f"{key}: no Persian {kind} example"
            assert any(not is_persian(v) for v in values), f"{key}: no English {kind} example"


def _validator(schema: dict[str, Any]) -> OAS31Validator:
    # References in the document point at `#/components/...`: resolve them from a root that has them.
    return OAS31Validator({**schema, "components": DOC["components"]})


@pytest.mark.parametrize("key", OPERATION_IDS)
def test_json_examples_match_their_schemas(key: str) -> None:
    _, operation = _operation(key)
    medias = list(operation.get("requestBody", {}).get("content", {}).items())
    for response in operation["responses"].values():
        medias += list(response.get("content", {}).items())
    for media_type, media in medias:
        if "json" not in media_type:
            continue
        for value in examples_of(media):
            _validator(media["schema"]).validate(value)


@pytest.mark.parametrize(
    "key", ["POST /v1/threads/{thread_id}/runs", "GET /v1/threads/{thread_id}/runs/{run_id}/stream"]
)
def test_the_event_stream_is_documented_with_examples_that_follow_the_id_rule(key: str) -> None:
    _, operation = _operation(key)
    response = operation["responses"]["200"]
    assert "Location" in response["headers"]
    media = response["content"]["text/event-stream"]
    streams = examples_of(media)
    assert any(is_persian(s) for s in streams) and any(not is_persian(s) for s in streams)
    for stream in streams:
        events, _ = parse_blocks(stream)
        names = [e.event for e in events]
        assert names[0] == "metadata" and names[-1] == "end"
        end = events[-1].data
        run_id = end["run_id"]
        delivered, text = events[0].offset, ""
        for event in events:
            if event.event == "token":
                delivered += len(event.data["content"])
                text += event.data["content"]
            assert event.id == f"{run_id}:{delivered}"
        assert end["message"]["content"].endswith(text) and len(end["message"]["content"]) == delivered


def test_the_description_explains_auth_errors_the_stream_and_the_rejoin() -> None:
    description = DOC["info"]["description"]
    for needed in (
        "Authorization: Bearer",
        "application/problem+json",
        "Retry-After",
        "text/event-stream",
        "id: <run_id>:<offset>",
        ": keep-alive",
        "Location: /v1/threads/{thread_id}/runs/{run_id}/stream",
        "Last-Event-ID",
        "/v1/threads/{thread_id}/runs/{run_id}/stream",
    ):
        assert needed in description, needed
    for event in ("metadata", "progress", "token", "end", "error"):
        assert re.search(rf"`{event}`", description), event


@pytest.mark.parametrize("key", OPERATION_IDS)
def test_v1_operations_name_the_bearer_token_and_the_others_need_none(key: str) -> None:
    _, operation = _operation(key)
    schemes = DOC["components"]["securitySchemes"]
    if key.split(" ", 1)[1].startswith("/v1/"):
        (requirement,) = operation["security"]
        (name,) = requirement
        assert schemes[name] == {**schemes[name], "type": "http", "scheme": "bearer"}
    else:
        assert "security" not in operation
