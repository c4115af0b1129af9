"""Shared test setup: a real Postgres (tests/fixtures/postgres.py) and the service app."""

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.app",
    "tests.fixtures.stoppable_postgres",
    "tests.fixtures.knowledge",
]
