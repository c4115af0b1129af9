"""`chatbot ingest --tenant T PATH...`: load a tenant's documents into the knowledge base."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import Progress

from chatbot.cli import common


def ingest(
    tenant: str = typer.Option(
        ..., "--tenant", help="Tenant whose knowledge base receives the documents.", callback=common.caller_id
    ),
    paths: list[Path] = typer.Argument(..., exists=True, help="Markdown or text files, or folders of them."),
) -> None:
    """Ingest documents (idempotent: unchanged ones keep their chunk ids)."""
    from chatbot.db.pool import open_pool
    from chatbot.retrieval.embeddings import load_embeddings
    from chatbot.retrieval.ingest import ingest_paths

    settings = common.load_settings(environment="dev")  # needs no token key

    async def _go() -> None:
        with Progress(transient=True) as bar:
            task = bar.add_task("ingesting", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            async with open_pool(settings) as pool:
                report = await ingest_paths(
                    pool, tenant, paths, embeddings=load_embeddings(settings.embeddings), progress=progress
                )
        typer.echo(report.counts())

    common.run(_go())
