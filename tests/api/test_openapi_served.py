"""The document a running service serves: no token needed, Persian examples intact."""

from __future__ import annotations

import httpx

from tests.api.openapi_doc import examples_of, is_persian


async def test_a_running_app_serves_its_document_with_the_persian_examples(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")  # no token: the document is not under /v1/
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    doc = response.json()
    run = doc["paths"]["/v1/threads/{thread_id}/runs"]["post"]
    request_examples = run["requestBody"]["content"]["application/json"]["examples"]
    assert "بیمه" in request_examples["persian"]["value"]["message"]["content"]
    answer = run["responses"]["200"]["content"]
    assert is_persian(answer["application/json"]["examples"]["persian"]["value"]["message"]["content"])
    assert any(is_persian(stream) for stream in examples_of(answer["text/event-stream"]))
    assert "شکستگی شیشه" in response.content.decode("utf-8")  # UTF-8 as written, not \u escapes


async def test_the_document_agrees_with_the_service_on_a_real_error(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    documented = doc["paths"]["/v1/threads/{thread_id}/messages"]["get"]["responses"]["401"]
    answered = await client.get("/v1/threads/t-1/messages")  # no token
    assert answered.status_code == 401
    assert answered.headers["content-type"].split(";")[0] in documented["content"]
    example = documented["content"]["application/problem+json"]["example"]
    assert set(answered.json()) == set(example)
    assert answered.headers["www-authenticate"] == "Bearer"
