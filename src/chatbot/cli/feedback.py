"""`chatbot feedback export`: rated runs as JSON Lines for the evaluation dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

import typer
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from chatbot.cli import common
from chatbot.db.pool import open_pool
from chatbot.threads.export import export_feedback, parse_since

feedback_app = typer.Typer(help="Run feedback from users, for the evaluation dataset.", no_args_is_help=True)


@feedback_app.command("export")
def export(
    since: str = typer.Option(..., "--since", help="ISO date or datetime (UTC unless an offset is given)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="File to write; standard output when omitted."),
) -> None:
    """Write one JSON line per run rated since DATE: rating, question, answer, citations, status."""
    try:
        moment = parse_since(since)
    except ValueError as exc:
        common.fail(f"--since: {exc}", 2)
        return
    settings = common.load_settings(environment="dev")  # needs no token key

    async def _go(out: TextIO) -> int:
        count = 0
        async with open_pool(settings) as pool:
            saver = AsyncPostgresSaver(pool)
            async for record in export_feedback(pool, saver, moment):
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        return count

    if output is None:
        count = common.run(_go(sys.stdout))
    else:
        with output.open("w", encoding="utf-8") as handle:
            count = common.run(_go(handle))
    typer.echo(f"exported {count} rated runs since {moment.isoformat()}", err=True)
