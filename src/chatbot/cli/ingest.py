"""`chatbot ingest --tenant T PATH...`: load a tenant's documents into the knowledge base."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from chatbot.cli import common
from chatbot.ids import TenantId

SKIPPED_EXIT = 1


def ingest(
    tenant: str = typer.Option(
        ..., "--tenant", help="Tenant whose knowledge base receives the documents.", callback=common.caller_id
    ),
    paths: list[Path] = typer.Argument(
        ..., exists=True, help="Files or folders: Markdown, text, PDF (with a text layer), DOCX and HTML."
    ),
    skip_unreadable: bool = typer.Option(
        False,
        "--skip-unreadable",
        help="Exit 0 even when files were skipped (each is still named on standard error).",
    ),
) -> None:
    """Ingest documents (idempotent: unchanged ones keep their chunk ids).

    Every file that is not taken is named on standard error with the reason; the exit status
    is 1 when any was, unless --skip-unreadable. Limits: the CHATBOT_INGEST_* settings.
    """
    from chatbot.db.pool import open_pool
    from chatbot.retrieval.embeddings import load_embeddings
    from chatbot.retrieval.ingest import IngestReport, SkippedFile, document_reader, ingest_paths

    settings = common.load_settings(environment="dev")  # needs no token key

    async def _go() -> IngestReport:
        console = Console(stderr=True)
        with (
            Progress(
                TextColumn("ingesting"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("files{task.fields[pages]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
                disable=not console.is_terminal,
            ) as bar,
            document_reader(settings) as reader,
        ):
            task = bar.add_task("ingesting", total=None, pages="")
            pages = 0

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            def pages_read(count: int) -> None:
                nonlocal pages
                pages += count
                bar.update(task, pages=f", {pages} pages")

            def skipped(file: SkippedFile) -> None:
                # Above the bar on a terminal (the live display takes stderr's writes), as is elsewhere.
                typer.echo(file.line(), err=True)

            async with open_pool(settings) as pool:
                return await ingest_paths(
                    pool,
                    TenantId(tenant),
                    paths,
                    embeddings=load_embeddings(settings.embeddings),
                    progress=progress,
                    reader=reader,
                    on_skip=skipped,
                    pages_read=pages_read,
                )

    report = common.run(_go())
    typer.echo(report.counts())
    if report.skipped and not skip_unreadable:
        raise typer.Exit(SKIPPED_EXIT)
