"""`chatbot retention [--older-than DAYS] [--dry-run]`: delete threads nobody has touched for DAYS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import typer

from chatbot.cli import common


def retention(
    older_than: float | None = typer.Option(
        None,
        "--older-than",
        min=0,
        help="Days since a thread's newest checkpoint; CHATBOT_RETENTION_DAYS when omitted.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count what would be deleted; delete nothing."),
    batch_size: int = typer.Option(200, min=1, help="Stale threads found per scan."),
    max_locks: int = typer.Option(32, min=1, help="Thread locks held at once: threads deleted per transaction."),
) -> None:
    """Delete threads whose newest checkpoint is older than DAYS, skipping runs in flight.

    Export feedback first (`chatbot feedback export`): a thread's feedback goes with it.
    """
    from chatbot.ops.retention import purge_stale_threads

    settings = common.load_settings(environment="dev")  # needs no token key
    days = settings.retention_days if older_than is None else older_than
    if older_than is None and days <= 0:
        common.fail("no retention period: pass --older-than DAYS or set CHATBOT_RETENTION_DAYS", 2)
    cutoff = datetime.now(UTC) - timedelta(days=days)

    async def _go() -> None:
        async with common.open_pool_and_locks(settings) as (pool, locks):
            report = await purge_stale_threads(
                pool, locks, cutoff, batch_size=batch_size, dry_run=dry_run, max_locks=max_locks
            )
        verb = "would delete" if dry_run else "deleted"
        typer.echo(
            f"older_than_days={days:g} stale={report.stale} {verb}={report.stale if dry_run else report.deleted} "
            f"skipped_in_flight={report.skipped_in_flight}"
        )

    common.run(_go())
