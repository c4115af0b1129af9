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
    from chatbot.db.pool import make_pool, resolve_database_url
    from chatbot.ops.retention import purge_stale_threads
    from chatbot.threads.locks import Locks

    settings = common.load_settings(environment="dev")  # needs no token key
    cutoff = datetime.now(UTC) - timedelta(days=older_than)

    async def _go() -> None:
        url = await resolve_database_url(settings)
        pool = make_pool(url, settings, name="retention", min_size=1, max_size=2)
        lock_pool = make_pool(url, settings, name="retention-locks", min_size=1, max_size=batch_size + 1)
        await pool.open(wait=True)
        await lock_pool.open(wait=True)
        try:
            report = await purge_stale_threads(pool, Locks(lock_pool), cutoff, batch_size=batch_size, dry_run=dry_run)
        finally:
            await lock_pool.close()
            await pool.close()
        verb = "would delete" if dry_run else "deleted"
        typer.echo(
            f"stale={report.stale} {verb}={report.stale if dry_run else report.deleted} "
            f"skipped_in_flight={report.skipped_in_flight}"
        )

    common.run(_go())
