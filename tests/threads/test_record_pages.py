"""The run record shows each retrieved chunk's pages (a PDF's, null without pages); the offline answer names them."""

from __future__ import annotations

from pathlib import Path

from chatbot.db.pool import make_pool
from chatbot.documents.model import Document, Paragraph, ReadLimits, Section
from chatbot.documents.reader import DocumentReader
from chatbot.ids import TenantId
from chatbot.retrieval.ingest import ingest_paths
from tests.fixtures.app import running_app
from tests.fixtures.document_readers import DESCRIBED, write_described
from tests.fixtures.messages import send_for_answer
from tests.fixtures.postgres import settings_for
from tests.fixtures.retrieval_kb import write_docs
from tests.fixtures.tokens import auth

EN = {"locale": "en-US"}
WORDING = Document(
    "Quorvane policy wording",
    "en",
    (
        Section(
            ("Quorvane policy wording", "Glass"),
            (
                Paragraph("Quorvane windscreen glass breakage is covered", (3,)),
                Paragraph("with no deductible for the first claim.", (4,)),
            ),
        ),
    ),
    paged=True,
)


async def test_a_retrieved_pdf_chunk_shows_its_pages_and_a_markdown_chunk_null(
    isolated_database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "kb"
    write_described(root / "wording.pdf", WORDING)
    write_docs(
        root, {"faq.md": "# Quorvane glass FAQ\n\nQuorvane windscreen glass breakage is covered: claim it in the app."}
    )
    pool = make_pool(isolated_database_url, settings_for(isolated_database_url), name="t", min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        with DocumentReader(ReadLimits(seconds=30), readers={"pdf": DESCRIBED}) as reader:
            report = await ingest_paths(pool, TenantId("acme"), [root], reader=reader)
        assert (report.added, report.skipped) == (2, [])
    finally:
        await pool.close()
    async with running_app(isolated_database_url) as client:
        answer = await send_for_answer(client, "pages", "Is Quorvane windscreen glass breakage covered?", **EN)
        response = await client.get(f"/v1/threads/pages/runs/{answer['run_id']}", headers=auth(**EN))
        quoting_the_pdf = await send_for_answer(
            client, "pages-2", "Which deductible applies to Quorvane windscreen glass breakage?", **EN
        )
    assert response.status_code == 200, response.text
    # The offline answer says where in the PDF its quote is.
    assert quoting_the_pdf["message"]["content"].startswith(
        "According to “Quorvane policy wording › Glass”, pages 3–4:"
    ), quoting_the_pdf["message"]["content"]
    retrieved = {c["document_id"]: c for c in response.json()["context"]["retrieved"]}
    assert set(retrieved) == {"wording.pdf", "faq.md"}
    assert retrieved["wording.pdf"]["pages"] == [3, 4]
    assert "no deductible" in retrieved["wording.pdf"]["text"]
    assert retrieved["faq.md"]["pages"] is None
    assert set(retrieved["faq.md"]) == {"chunk_id", "document_id", "version", "text", "pages"}
