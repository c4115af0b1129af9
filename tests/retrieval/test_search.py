"""Hybrid search against a real Postgres: tenancy, normalisation, relevance, ranking."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from chatbot.caller import CallerContext
from chatbot.db.pool import Pool
from chatbot.ids import TenantId, UserId
from chatbot.retrieval.ingest import ingest_paths
from chatbot.retrieval.normalize import query_words
from chatbot.retrieval.search import MAX_QUERY_TERMS, search_knowledge
from tests.fixtures.retrieval_kb import HashingEmbeddings, chunk_ids, write_docs

DEMO_KB = Path(__file__).resolve().parents[2] / "knowledge" / "demo"

TENANT_A_DOCS = {
    "cars.md": "# Car body cover\n\n## Claims\n\nReport a car body claim in 5 days with the police report.",
    "travel.md": "# Travel cover\n\nMedical costs abroad are covered up to 50,000 euros.",
    "fa.md": "# بیمه بدنه\n\nبرای لغو بیمه‌نامه بدنه درخواست لغو را در اپلیکیشن ثبت کنید.",
}
TENANT_B_DOCS = {
    "secret.md": "# Zebra protection plan\n\nThe zebra stripes warranty pays 777 tomans per lost stripe.",
    "cars.md": "# Car body cover\n\n## Claims\n\nBlue moon claims are filed on a Tuesday with a purple form.",
    "fa.md": "# بیمه گورخر\n\nراه‌راه‌های گورخر با پوشش ویژه ۹۹۹ تومانی بیمه می‌شوند.",
}


def caller(tenant: str, locale: str = "fa-IR") -> CallerContext:
    return CallerContext(tenant_id=TenantId(tenant), user_id=UserId("user-1"), locale=locale)


def new_tenant() -> TenantId:
    return TenantId(f"t-{uuid.uuid4().hex[:10]}")


async def ingest_docs(pool: Pool, tmp_path: Path, tenant: str, docs: dict[str, str], **kwargs: object) -> None:
    root = write_docs(tmp_path / tenant, docs)
    await ingest_paths(pool, tenant, [root], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def two_tenants(pool: Pool, tmp_path: Path) -> tuple[str, str]:
    a, b = new_tenant(), new_tenant()
    await ingest_docs(pool, tmp_path, a, TENANT_A_DOCS)
    await ingest_docs(pool, tmp_path, b, TENANT_B_DOCS)
    return a, b


ISOLATION_QUERIES = [
    *(text for text in TENANT_B_DOCS.values()),
    "The zebra stripes warranty pays 777 tomans per lost stripe.",
    "Zebra protection plan",
    "Blue moon claims are filed on a Tuesday with a purple form",
    "راه‌راه‌های گورخر با پوشش ویژه ۹۹۹ تومانی",
    "car body claim",
    "بیمه",
    "zebr strips",
]


@pytest.mark.parametrize("query", ISOLATION_QUERIES)
async def test_a_tenant_never_receives_another_tenants_chunk(
    pool: Pool, two_tenants: tuple[str, str], query: str
) -> None:
    a, _ = two_tenants
    own = set(await chunk_ids(pool, a))
    found = await search_knowledge(pool, caller(a), query, k=50)
    assert {c.chunk_id for c in found} <= own
    assert all(c.document_id in TENANT_A_DOCS for c in found)


async def test_other_tenant_finds_its_own_text(pool: Pool, two_tenants: tuple[str, str]) -> None:
    _, b = two_tenants
    found = await search_knowledge(pool, caller(b), "zebra stripes warranty")
    assert found and found[0].document_id == "secret.md"


async def test_vector_search_stays_in_the_tenant(pool: Pool, tmp_path: Path) -> None:
    embeddings = HashingEmbeddings()
    a, b = new_tenant(), new_tenant()
    await ingest_docs(pool, tmp_path, a, TENANT_A_DOCS, embeddings=embeddings)
    await ingest_docs(pool, tmp_path, b, TENANT_B_DOCS, embeddings=embeddings)
    own = set(await chunk_ids(pool, a))
    for query in ISOLATION_QUERIES:
        found = await search_knowledge(pool, caller(a), query, k=50, embeddings=embeddings)
        assert {c.chunk_id for c in found} <= own
    found = await search_knowledge(pool, caller(a), "medical costs abroad euros", embeddings=embeddings)
    assert found[0].document_id == "travel.md"


async def test_search_needs_a_tenant(pool: Pool) -> None:
    with pytest.raises(ValueError):
        await search_knowledge(pool, caller(""), "car body claim")


async def test_nonsense_finds_nothing(pool: Pool, two_tenants: tuple[str, str]) -> None:
    a, _ = two_tenants
    for query in ["qwxz plorb vunk", "کژپث ژغضظ", "what is the weather in Paris tomorrow", "?!...", ""]:
        assert await search_knowledge(pool, caller(a), query) == []


OTHER_DOC = "# بیمه عمر\n\nسرمایه فوت به ذینفعان پرداخت می‌شود."


@pytest.mark.parametrize(
    ("name", "text", "query"),
    [
        (
            "takmili.md",
            "# بیمه تکمیلی\n\nسقف دندانپزشکی بیمه تکمیلی ده میلیون تومان است.",
            "سقف دندانپزشكي بيمه تكميلي",
        ),
        ("pay.md", "# پرداخت\n\nپرداخت اينترنتي با همه كارت‌هاي بانكي ممكن است.", "پرداخت اینترنتی با کارت بانکی"),
    ],
    ids=["arabic-letter query, persian text", "persian query, arabic-letter text"],
)
async def test_arabic_and_persian_letter_forms_meet(
    pool: Pool, tmp_path: Path, name: str, text: str, query: str
) -> None:
    tenant = new_tenant()
    await ingest_docs(pool, tmp_path, tenant, {name: text, "other.md": OTHER_DOC})
    found = await search_knowledge(pool, caller(tenant), query)
    assert found and found[0].document_id == name


async def test_persian_digits_are_found_with_ascii_digits(pool: Pool, tmp_path: Path) -> None:
    tenant = new_tenant()
    await ingest_docs(
        pool,
        tmp_path,
        tenant,
        {
            "renew.md": "# تمدید\n\nتا ۳۰ روز بعد از پایان می‌توانید تمدید کنید.",
            "theft.md": "# سرقت\n\nخسارت سرقت پس از ۶۰ روز پرداخت می‌شود.",
        },
    )
    found = await search_knowledge(pool, caller(tenant), "تمدید 30 روز")
    assert found[0].document_id == "renew.md"
    found = await search_knowledge(pool, caller(tenant), "سرقت 60")
    assert found[0].document_id == "theft.md"


ZWNJ_QUERIES = ["میخواهم بیمه نامه را لغو کنم", "می خواهم بیمه‌نامه را لغو کنم", "لغو بیمهنامه"]


@pytest.mark.parametrize("query", ZWNJ_QUERIES)
async def test_zero_width_non_joiner_variants_match(pool: Pool, tmp_path: Path, query: str) -> None:
    tenant = new_tenant()
    await ingest_docs(
        pool,
        tmp_path,
        tenant,
        {
            "cancel.md": "# لغو\n\nاگر می‌خواهم بیمه‌نامه را لغو کنم باید درخواست بدهم.",
            "buy.md": "# خرید\n\nخرید بیمه آنلاین است.",
        },
    )
    found = await search_knowledge(pool, caller(tenant), query)
    assert found and found[0].document_id == "cancel.md"


async def test_results_are_best_first_with_scores_and_k(pool: Pool, two_tenants: tuple[str, str]) -> None:
    a, _ = two_tenants
    found = await search_knowledge(pool, caller(a), "car body claim police report", k=2)
    assert 1 <= len(found) <= 2
    assert found[0].document_id == "cars.md"
    assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)
    assert (found[0].document_id, found[0].language, found[0].version) == ("cars.md", "en", 1)
    assert found[0].title and found[0].text


async def test_a_misspelt_word_still_finds_its_document(pool: Pool, two_tenants: tuple[str, str]) -> None:
    a, _ = two_tenants
    found = await search_knowledge(pool, caller(a), "medicl costs abroad")
    assert found and found[0].document_id == "travel.md"


BENCHMARK = [
    ("How do I file a car body claim and which documents do I need?", "en/car-body-claims.md"),
    ("What does travel insurance cover for medical costs abroad?", "en/travel.md"),
    ("بیمه شخص ثالث را تا چند روز بعد از پایان می‌توانم تمدید کنم؟", "fa/shakhs-sales.md"),
    ("برای لغو بیمه‌نامه بدنه چه کار کنم؟", "fa/laghv.md"),
]


# A word the knowledge base never uses ("family", "خانواده", "مناسب") beside the product the
# question names (in its document's title), and a plural form the tenant lacks ("طرحهایی")
# beside the stem it has: each finds the product's document, not a section sharing a stray word.
NAMED_PRODUCT = [
    ("Which life insurance is right for my family?", "en/life.md"),
    ("کدام بیمه عمر برای خانواده من مناسب است؟", "fa/omr.md"),
    ("بیمه عمر چه طرح‌هایی دارد؟", "fa/omr.md"),
]


async def test_a_question_naming_a_product_finds_it_among_words_the_tenant_lacks(pool: Pool) -> None:
    tenant = new_tenant()
    await ingest_paths(pool, tenant, [DEMO_KB])
    for query, document_id in NAMED_PRODUCT:
        found = await search_knowledge(pool, caller(tenant), query)
        assert found and found[0].document_id == document_id, query


async def test_demo_knowledge_base_answers_the_benchmark_questions(pool: Pool) -> None:
    tenant = new_tenant()
    await ingest_paths(pool, tenant, [DEMO_KB])
    for query, document_id in BENCHMARK:
        found = await search_knowledge(pool, caller(tenant), query)
        assert found and found[0].document_id == document_id, query


# A customer tells what happened before asking: more words than search weighs, the question last.
TOLD_THEN_ASKED = [
    (
        "Last Tuesday evening another car hit the rear of mine at a red light on Valiasr street; the other"
        " driver admitted it, we called the police, took photos of both cars and the plates, and exchanged"
        " policy numbers. The bumper, the boot lid and a rear light are damaged and the car still drives."
        " Which documents do I need for the car body claim, and how long does the review usually take?",
        "en/car-body-claims.md",
    ),
    (
        "سه‌شنبه گذشته عصر در خیابان ولیعصر پشت چراغ قرمز ایستاده بودم که خودروی دیگری از عقب به ماشینم زد."
        " راننده مقصر بودنش را پذیرفت، پلیس آمد، از هر دو خودرو و پلاک‌ها عکس گرفتیم و شماره بیمه‌نامه‌ها را"
        " رد و بدل کردیم. سپر، در صندوق عقب و یک چراغ آسیب دیده ولی ماشین هنوز راه می‌رود و مشکلی در موتور نیست."
        " برای دریافت خسارت بیمه بدنه چه مدارکی لازم است و بررسی پرونده معمولاً چند روز طول می‌کشد؟",
        "fa/badaneh-khesarat.md",
    ),
]


@pytest.mark.parametrize(("message", "document_id"), TOLD_THEN_ASKED)
async def test_a_long_message_is_searched_by_the_question_it_ends_with(
    pool: Pool, message: str, document_id: str
) -> None:
    assert len(query_words(message)) > MAX_QUERY_TERMS  # the telling alone fills the terms search weighs
    tenant = new_tenant()
    await ingest_paths(pool, tenant, [DEMO_KB])
    found = await search_knowledge(pool, caller(tenant), message)
    assert found and found[0].document_id == document_id
