"""A reader's Document is cut as Markdown is: heading paths as titles, rows with their header, pages kept."""

from __future__ import annotations

from chatbot.documents.model import Document, ListItem, Paragraph, Section, Table
from chatbot.retrieval.chunking import CHUNK_SIZE, split_document, split_structured

COVER = Table(
    ("Cover", "Limit", "Deductible"),
    (("Glass", "20,000,000 rials", "none"), ("Theft", "full value", "10%")),
    (3,),
)
DOCUMENT = Document(
    "Car body policy",
    "en",
    (
        Section(("Car body policy",), (Paragraph("The policy covers your car's body.", (1,)),)),
        Section(("Car body policy", "Cover"), (Paragraph("What is covered:", (2,)), COVER)),
        Section(
            ("Car body policy", "Claims", "Documents"),
            (ListItem("Driving licence", (4,)), ListItem("Police report", (4, 5)), Paragraph("Send them.", (5,))),
        ),
        Section(("Car body policy", "Empty heading"), ()),
    ),
    paged=True,
)


def test_each_section_is_titled_by_its_heading_path_without_repeating_the_document_title() -> None:
    chunks = split_structured("car.pdf", "Car body policy", DOCUMENT)
    assert [c.title for c in chunks] == [
        "Car body policy",
        "Car body policy › Cover",
        "Car body policy › Claims › Documents",
    ]
    assert [c.ordinal for c in chunks] == [0, 1, 2]


def test_table_rows_carry_their_header_and_list_items_stay_items() -> None:
    _, cover, documents = split_structured("car.pdf", "Car body policy", DOCUMENT)
    assert cover.text == (
        "What is covered:\n\n"
        "Cover: Glass; Limit: 20,000,000 rials; Deductible: none\n"
        "Cover: Theft; Limit: full value; Deductible: 10%"
    )
    assert documents.text == "- Driving licence\n- Police report\n\nSend them."


def test_a_chunk_carries_the_pages_of_the_blocks_its_text_came_from() -> None:
    first, cover, documents = split_structured("car.pdf", "Car body policy", DOCUMENT)
    assert (first.pages, cover.pages, documents.pages) == ((1,), (2, 3), (4, 5))


def test_a_long_section_is_cut_by_size_and_each_piece_keeps_only_its_own_pages() -> None:
    paragraphs = tuple(Paragraph(f"Clause {n}. " + "The insurer pays the repair. " * 12, (n,)) for n in range(1, 9))
    document = Document("Wording", None, (Section(("Wording", "Clauses"), paragraphs),), paged=True)
    chunks = split_structured("w.pdf", "Wording", document)
    assert len(chunks) > 2 and all(len(c.text) <= CHUNK_SIZE for c in chunks)
    for chunk in chunks:
        clauses = {int(word) for word in chunk.text.replace(".", " ").split() if word.isdigit()}
        assert set(chunk.pages) == clauses, chunk
    assert chunks[0].pages[0] == 1 and chunks[-1].pages[-1] == 8


def test_ids_are_content_derived_as_for_markdown() -> None:
    # The same text under the same document id gets the same id, whatever it was read from.
    markdown = split_document("car.pdf", "Car body policy", "# Car body policy\n\nThe policy covers your car's body.")
    structured = split_structured("car.pdf", "Car body policy", DOCUMENT)
    assert markdown[0].chunk_id == structured[0].chunk_id
    assert split_structured("car.pdf", "Car body policy", DOCUMENT) == structured


def test_a_document_without_pages_gives_chunks_without_pages() -> None:
    document = Document(None, "fa", (Section(("راهنما",), (Paragraph("متن راهنما."),)),))
    [chunk] = split_structured("guide.docx", "راهنما", document)
    assert (chunk.title, chunk.text, chunk.pages) == ("راهنما", "متن راهنما.", ())
