"""A long message's search: the telling first, the question last (retrieval/search.py `searched_words`).

Search weighs a query's first `MAX_QUERY_TERMS` words. A customer who tells what happened
before asking fills them with the telling, whose names and dates no chunk holds. Since
`searched_words`, a message over that many words that asks something is searched by its
questions. This bench counts, on messages written for it after that change and never used to
tune it (the tests' two examples are not among them), how often the first chunk comes from
the document that answers, searched both ways.

    .venv/bin/python -m bench.long_messages
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench._pg import bench_database, bench_settings, ingest_into
from chatbot.caller import CallerContext
from chatbot.ids import TenantId, UserId
from chatbot.retrieval import search
from chatbot.retrieval.normalize import query_words

TENANT = TenantId("acme")
KB = Path(__file__).resolve().parent.parent / "knowledge" / "demo"
# Held out: written for this bench, each told at length before its question, none seen while the
# change was made. (message, the document that answers it)
HELD_OUT = [
    (
        "We fly to Istanbul next Friday, my wife, our two children and my mother-in-law who is 68, for"
        " nine days; the hotel is near Taksim and we plan a day trip to Bursa by ferry. My daughter has"
        " asthma and my mother-in-law had knee surgery last year. Does the travel policy pay for a"
        " hospital stay if one of us falls ill abroad?",
        "en/travel.md",
    ),
    (
        "I sold my Peugeot 206 to a colleague last week, we signed the papers at the notary office on"
        " Monday and he already registered it in his name, so I no longer own the car and will not"
        " buy another one this year. How do I cancel my car body policy and do I get part of the"
        " premium back?",
        "en/cancellation.md",
    ),
    (
        "Yesterday evening a pipe under the kitchen sink burst while we were at my brother's house;"
        " when we came back the floor, the lower cupboards and the carpet in the living room were"
        " soaked and the neighbour downstairs says his ceiling is stained. Is water damage from a"
        " burst pipe covered by my home insurance?",
        "en/home.md",
    ),
    (
        "My salary is paid at the end of each month and this year the school fees of both children"
        " and the rent increase all fall in September, so paying a whole year's premium at once is"
        " hard for us even though we want to keep the cover. Can I pay the premium in monthly"
        " instalments, and by which methods?",
        "en/payment.md",
    ),
    (
        "ما هفته آینده با همسرم و دو فرزندمان برای ده روز به ارمنستان می‌رویم، هتل را در ایروان رزرو کرده‌ایم و"
        " قرار است یک روز هم به دریاچه سوان برویم. پسرم آسم دارد و مادرم که همراه ماست هفتاد سال دارد و پارسال"
        " زانویش را عمل کرده است. اگر یکی از ما در سفر بیمار شود، بیمه مسافرتی هزینه بیمارستان را می‌دهد؟",
        "fa/safar.md",
    ),
    (
        "ماشینم را هفته پیش به یکی از همکارانم فروختم، قرارداد را در دفترخانه امضا کردیم و او سند را هم به نام"
        " خودش زده است، پس دیگر ماشینی ندارم و امسال هم قصد خرید ماشین دیگری ندارم چون محل کارم نزدیک"
        " خانه است و بیشتر روزها پیاده یا با مترو می‌روم و آخر هفته‌ها هم با ماشین پدرم بیرون می‌رویم."
        " چطور بیمه‌نامه بدنه‌ام را لغو کنم و آیا بخشی از حق بیمه برمی‌گردد؟",
        "fa/laghv.md",
    ),
    (
        "دیشب وقتی خانه برادرم مهمان بودیم لوله زیر سینک آشپزخانه ترکید و وقتی برگشتیم کف خانه، کابینت‌های پایین"
        " و فرش پذیرایی خیس شده بود و همسایه طبقه پایین می‌گوید سقف خانه‌اش لک شده و گچ آن ریخته است؛"
        " لوله‌کش امروز صبح آمد و لوله را عوض کرد و از همه جا عکس گرفتیم."
        " خسارت آب ناشی از ترکیدگی لوله را بیمه منزل پرداخت می‌کند؟",
        "fa/manzel.md",
    ),
    (
        "سی و پنج سال دارم، دو فرزند کوچک دارم و همسرم خانه‌دار است، قسط وام مسکن هم تا ده سال دیگر ادامه دارد"
        " و نگرانم اگر اتفاقی برایم بیفتد خانواده‌ام از پس هزینه‌ها برنیایند و خانه را از دست بدهند؛ پدرم"
        " هم سال گذشته بیمار شد و دیدم بدون پس‌انداز کافی یک خانواده چقدر زود زیر بار قرض می‌رود."
        " بیمه عمر چه طرح‌هایی دارد و حق بیمه را چطور می‌پردازم؟",
        "fa/omr.md",
    ),
]


async def main() -> None:
    """Ingest the demo knowledge base, then search each message both ways and print the hits."""
    async with bench_database("long_messages") as url:
        settings = bench_settings(url)
        await ingest_into(url, settings, TENANT, [KB])
        caller = CallerContext(TENANT, UserId("bench"), locale="en-US")
        async with AsyncConnectionPool(url, open=False, kwargs={"autocommit": True, "row_factory": dict_row}) as pool:
            searched = search.searched_words
            ways: list[tuple[str, Callable[[str], list[str]]]] = [
                ("first 32 words", query_words),
                ("its questions", searched),
            ]
            hits = dict.fromkeys((way for way, _ in ways), 0)
            for message, document in HELD_OUT:
                assert len(query_words(message)) > search.MAX_QUERY_TERMS, message[:40]
                for way, words in ways:
                    vars(search)["searched_words"] = words  # the one switch: which words go to the statement
                    found = await search.search_knowledge(pool, caller, message)
                    hit = bool(found) and found[0].document_id == document
                    hits[way] += hit
                    first = found[0].document_id if found else "-"
                    print(f"{document:24s} {way:15s} {'hit' if hit else 'miss'} (first: {first})")
            vars(search)["searched_words"] = searched
    for way, n in hits.items():
        print(f"{way}: {n} of {len(HELD_OUT)} first chunks from the answering document")


if __name__ == "__main__":
    asyncio.run(main())
