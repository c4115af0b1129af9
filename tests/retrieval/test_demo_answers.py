"""`make dev`'s demo tenant answers from the sample knowledge base, with correct citations."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from tests.fixtures.app import running_app
from tests.fixtures.knowledge import load_demo_kb
from tests.fixtures.sse import parse_sse
from tests.fixtures.tokens import auth

CASES = [
    ("How do I file a car body claim and which documents do I need?", "en-US", "en/car-body-claims.md"),
    ("What does travel insurance cover for medical costs abroad?", "en-US", "en/travel.md"),
    ("بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟", "fa-IR", "fa/shakhs-sales.md"),
    ("برای لغو بیمه‌نامه بدنه چه کار کنم؟", "fa-IR", "fa/laghv.md"),
    # The demo's PDF and Word documents (rendered by scripts/render_demo_documents.py).
    ("فرانشیز بیمه مسئولیت کارفرما در هر حادثه چقدر است؟", "fa-IR", "fa/masouliat-karfarma.pdf"),
    ("حق بیمه سالانه سطح طلایی بیمه حوادث انفرادی چقدر است؟", "fa-IR", "fa/havades-enferadi.docx"),
]


@pytest.fixture(scope="module")
def demo_url(migrated_database_url: str) -> str:
    asyncio.run(load_demo_kb(migrated_database_url))
    return migrated_database_url


@pytest.mark.parametrize(("question", "locale", "document"), CASES, ids=[c[2] for c in CASES])
async def test_demo_question_is_answered_with_the_right_citation(
    demo_url: str, question: str, locale: str, document: str
) -> None:
    async with running_app(demo_url) as client:
        response = await client.post(
            f"/v1/threads/demo-{document.replace('/', '-')}/runs",
            json={"message": {"content": question}},
            headers=auth(locale=locale),
        )
    end = parse_sse(response.text)[-1][1]
    assert end["status"] == "answered"
    cited = end["citations"]
    assert len(cited) == 1 and cited[0].startswith(f"{document}#")
    # The answer quotes the cited chunk as written, figures and all.
    with psycopg.connect(demo_url) as conn:
        row = conn.execute(
            "select text from kb_chunks where tenant_id = 'acme' and chunk_id = %s", (cited[0],)
        ).fetchone()
    assert row is not None and row[0].strip() in end["message"]["content"]


async def test_an_answer_from_the_demo_pdf_names_its_page_and_the_record_keeps_it(demo_url: str) -> None:
    question = "فرانشیز بیمه مسئولیت کارفرما در هر حادثه چقدر است؟"
    async with running_app(demo_url) as client:
        response = await client.post(
            "/v1/threads/demo-pdf-page/runs", json={"message": {"content": question}}, headers=auth(locale="fa-IR")
        )
        end = parse_sse(response.text)[-1][1]
        record = (await client.get(f"/v1/threads/demo-pdf-page/runs/{end['run_id']}", headers=auth())).json()
    # The deductible is on the policy wording's third page (of its three A6 pages).
    assert "صفحهٔ ۳" in end["message"]["content"]
    retrieved = {r["chunk_id"]: r for r in record["context"]["retrieved"]}
    assert retrieved[end["citations"][0]]["pages"] == [3]
    assert all(r["pages"] is None for r in retrieved.values() if r["document_id"].endswith(".md"))
