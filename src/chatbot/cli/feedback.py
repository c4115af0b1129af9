"""`chatbot feedback export`: rated runs as JSON Lines for the evaluation dataset.

Run it before retention: `chatbot retention` and the replicas' sweep delete a thread's
feedback with the thread.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

import typer

from chatbot.cli import common
from chatbot.db.pool import open_pool
from chatbot.threads.export import export_feedback, parse_since

# A short key makes the pseudonyms guessable: user ids are few and often predictable.
MIN_EXPORT_KEY_LENGTH = 32

feedback_app = typer.Typer(help="Run feedback from users, for the evaluation dataset.", no_args_is_help=True)


@feedback_app.command("export")
def export(
    since: str = typer.Option(..., "--since", help="ISO date or datetime (UTC unless an offset is given)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="File to write; standard output when omitted."),
    without_user_key: bool = typer.Option(
        False, "--without-user-key", help="Export with `user_key` null instead of requiring CHATBOT_EXPORT_KEY."
    ),
) -> None:
    """Write one JSON line per run rated since DATE: rating, question, answer, citations, status, cohort.

    Each line carries the tenant, the locale and `user_key`, the user's pseudonym
    (HMAC-SHA256 under CHATBOT_EXPORT_KEY; never the raw id). Without a key the command
    refuses, unless --without-user-key. Run it before retention, which deletes a thread's
    feedback with the thread.
    """
    try:
        moment = parse_since(since)
    except ValueError as exc:
        common.fail(f"--since: {exc}: give a date as YYYY-MM-DD, or an ISO datetime.", 2)
        return
    settings = common.load_settings(environment="dev")  # needs no token key
    secret = settings.export_key.get_secret_value().strip() if settings.export_key else ""
    key: bytes | None = None
    if not without_user_key:
        if not secret:
            common.fail("no CHATBOT_EXPORT_KEY: set it to export pseudonymous user keys, or pass --without-user-key", 2)
        if len(secret) < MIN_EXPORT_KEY_LENGTH:
            common.fail(f"CHATBOT_EXPORT_KEY is too short: use at least {MIN_EXPORT_KEY_LENGTH} random characters", 2)
        key = secret.encode()

    async def _go(out: TextIO) -> int:
        count = 0
        async with open_pool(settings) as pool:
            async for record in export_feedback(pool, moment, key=key):
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        return count

    if output is None:
        count = common.run(_go(sys.stdout))
    else:
        with output.open("w", encoding="utf-8") as handle:
            count = common.run(_go(handle))
    typer.echo(f"exported {count} rated runs since {moment.isoformat()}", err=True)
