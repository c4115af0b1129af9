"""Erasure and thread deletion clean every table the catalogue keys by thread or store prefix.

A table a later library version (or migration) adds, keyed by `thread_id` or by the store's
`prefix`, is emptied of the erased user's rows although no code names it; the rows of other
users stay. Chosen over refusing unknown tables: see src/chatbot/threads/deletion.py.
"""

from __future__ import annotations

import json

import psycopg

from tests.fixtures.app import running_app, services_of
from tests.fixtures.catalogue import rows_containing, rows_of_threads, rows_under_namespace
from tests.fixtures.messages import send_for_answer
from tests.fixtures.tokens import auth

# `_` is a LIKE wildcard: a prefix match written with LIKE would take `catXuser` with `cat_user`.
USER, BYSTANDER = "cat_user", "catXuser"
VICTIM = {"user": USER, "locale": "en-US"}
OTHER = {"user": BYSTANDER, "locale": "en-US"}
JSON = {"Accept": "application/json"}

# As a future library table would be: keyed by thread, or by store namespace, nothing else.
FUTURE_TABLES = """
create table checkpoint_annotations (thread_id text not null, checkpoint_ns text not null default '', note text);
create table store_annotations (prefix text not null, key text not null, note text, primary key (prefix, key));
"""


def add_future_rows(url: str) -> None:
    """Create the tables no code knows, with a row for each thread and each user's namespaces."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FUTURE_TABLES)
        for thread in ("cat-1", "cat-2", "by-1"):
            conn.execute("insert into checkpoint_annotations (thread_id, note) values (%s, 'seen')", (thread,))
        for user in (USER, BYSTANDER):
            for tail in ("", ".facts", ".episodes"):  # the root, a known and a new namespace
                conn.execute(
                    "insert into store_annotations (prefix, key, note) values (%s, 'k', %s)",
                    (f"acme.user.{user}{tail}", json.dumps({"about": user})),
                )


async def test_erasure_empties_tables_keyed_by_thread_or_prefix_that_no_code_names(
    isolated_database_url: str,
) -> None:
    url = isolated_database_url
    async with running_app(url) as client:
        run_id = (await send_for_answer(client, "cat-1", "remember that I live in Yazd", **VICTIM))["run_id"]
        await send_for_answer(client, "cat-2", "How do I renew third-party insurance?", **VICTIM)
        await send_for_answer(client, "by-1", "remember that I live in Tabriz", **OTHER)
        feedback = await client.post(
            f"/v1/threads/cat-1/runs/{run_id}/feedback", json={"score": "up"}, headers=auth(**VICTIM)
        )
        assert feedback.status_code == 204
        await services_of(client).memory.drain(5)
        add_future_rows(url)
        bystander_threads = rows_of_threads(url, ["by-1"])
        bystander_memory = rows_under_namespace(url, ("acme", "user", BYSTANDER))
        # The catalogue sees the unknown tables, and they hold the user's rows before the erasure.
        assert rows_of_threads(url, ["cat-1", "cat-2"])["checkpoint_annotations"] == 2
        victim_memory = rows_under_namespace(url, ("acme", "user", USER))
        assert victim_memory["store_annotations"] == 3 and victim_memory["store"] > 0

        erased = await client.delete(f"/v1/users/{USER}", headers=auth(**VICTIM))
        assert erased.status_code == 200, erased.text
        report = {"threads_deleted": 2, "memory_items_deleted": victim_memory["store"], "feedback_deleted": 1}
        assert erased.json() == report

    assert set(rows_of_threads(url, ["cat-1", "cat-2"]).values()) == {0}
    assert set(rows_under_namespace(url, ("acme", "user", USER)).values()) == {0}
    assert rows_containing(url, USER) == {}  # no row of any table holds the user's id
    assert rows_containing(url, "Yazd") == {}  # nor what they said
    # The other user of the tenant (whose id `cat_user` would match with LIKE) keeps everything.
    assert rows_of_threads(url, ["by-1"]) == bystander_threads
    assert rows_under_namespace(url, ("acme", "user", BYSTANDER)) == bystander_memory
    assert bystander_memory["store_annotations"] == 3 and bystander_memory["store"] > 0


async def test_thread_deletion_empties_tables_keyed_by_thread_that_no_code_names(isolated_database_url: str) -> None:
    url = isolated_database_url
    async with running_app(url) as client:
        await send_for_answer(client, "cat-1", "How do I renew third-party insurance?", **VICTIM)
        await send_for_answer(client, "by-1", "How do I renew third-party insurance?", **OTHER)
        add_future_rows(url)
        before = rows_of_threads(url, ["cat-1"])
        assert before["checkpoint_annotations"] == 1 and before["checkpoints"] > 0
        bystander = rows_of_threads(url, ["by-1"])

        assert (await client.delete("/v1/threads/cat-1", headers=auth(**VICTIM))).status_code == 204

    assert rows_of_threads(url, ["cat-1"]) == dict.fromkeys(before, 0)
    assert rows_of_threads(url, ["by-1"]) == bystander
