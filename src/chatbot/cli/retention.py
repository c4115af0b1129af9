"""`chatbot retention --older-than DAYS [--dry-run]`: delete threads nobody has touched for DAYS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import typer

from chatbot.cli import common


def retention(
    older_than: float = typer.Option(..., "--older-than", min=0, help="Days since a thread's newest checkpoint."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count what would be deleted; delete nothing."),
    batch_size: int = typer.Option(200, min=1, help="Threads deleted per transaction."),
) -> None:
    """Delete threads whose newest checkpoint is older than DAYS, skipping runs in flight."""
    from chatbot.ops.retention import purge_stale_threads

    settings = common.load_settings(environment="dev")  # needs no token key
    cutoff = datetime.now(UTC) - timedelta(days=older_than)

    async def _go() -> None:
        async with common.open_pool_and_locks(settings) as (pool, locks):
            report = await purge_stale_threads(pool, locks, cutoff, batch_size=batch_size, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        typer.echo(
            f"stale={report.stale} {verb}={report.stale if dry_run else report.deleted} "
            f"skipped_in_flight={report.skipped_in_flight}"
        )

    common.run(_go())
