"""docs/api.md against the OpenAPI document: the same operations, the same statuses."""

from __future__ import annotations

import re
from pathlib import Path

from tests.api.openapi_doc import openapi_document, operations

API_MD = (Path(__file__).parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
DOC = openapi_document()
SERVED = {(method.upper(), path): op for method, path, op in operations(DOC)}

_ENDPOINT = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[A-Za-z0-9_{}/.:-]*)")
_ROW = re.compile(r"^\|\s*`(GET|POST|PUT|PATCH|DELETE) (/\S*)`\s*\|\s*(\d{3})[^|]*\|\s*([^|]*)\|\s*$", re.M)
_HEADING = re.compile(r"^#+ .*`(GET|POST|PUT|PATCH|DELETE) (/[^`\s?]*)", re.M)


def _rows() -> dict[tuple[str, str], tuple[int, set[int]]]:
    return {
        (method, path): (int(success), {int(s) for s in re.findall(r"\d{3}", errors)})
        for method, path, success, errors in _ROW.findall(API_MD)
    }


def test_every_operation_of_the_openapi_document_is_in_api_md() -> None:
    named = set(_rows()) | set(_HEADING.findall(API_MD))
    missing = set(SERVED) - named
    assert not missing, f"docs/api.md has no heading or row for {sorted(missing)}"


def test_every_endpoint_api_md_names_exists_in_the_openapi_document() -> None:
    named = set(_ENDPOINT.findall(API_MD))
    unknown = named - set(SERVED)
    assert named and not unknown, f"docs/api.md names endpoints that do not exist: {sorted(unknown)}"


def test_the_table_states_the_statuses_the_document_does() -> None:
    rows = _rows()
    assert rows
    for (method, path), (success, errors) in rows.items():
        documented = {int(status) for status in SERVED[(method, path)]["responses"]}
        assert success in documented, (method, path)
        assert errors == documented - {success}, (method, path, sorted(documented - {success}))
