"""The `chatbot` command: serve, dev, migrate, token, ingest, retention, erase-user, feedback."""

from __future__ import annotations

import functools
from typing import Any, cast

import typer
import uvicorn

from chatbot.cli import common
from chatbot.cli.budget import budget_app
from chatbot.cli.chat import chat
from chatbot.cli.check_model import check_model
from chatbot.cli.dev import dev
from chatbot.cli.evaluate import evaluate_command
from chatbot.cli.failure_line import Commands
from chatbot.cli.feedback import feedback_app
from chatbot.cli.ingest import ingest
from chatbot.cli.replay import replay
from chatbot.cli.retention import retention
from chatbot.cli.usage import usage
from chatbot.db.migrate import migrate as run_migrations
from chatbot.db.placement import CitusMissing, apply_placement
from chatbot.db.pool import resolve_database_url
from chatbot.ids import TenantId, UserId
from chatbot.limits import HeadDeadlineH11Protocol
from chatbot.logs import configure_logging
from chatbot.metrics import worker_metrics

app = Commands(
    help="Conversational agent service of the insurance support chatbot.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of a failure instead of one line."),
) -> None:
    Commands.debug = debug


app.command("dev")(dev)
app.command("ingest")(ingest)
app.command("retention")(retention)
app.add_typer(feedback_app, name="feedback")
app.add_typer(budget_app, name="budget")
app.command("replay")(replay)
app.command("chat")(chat)
app.command("usage")(usage)
app.command("check-model")(check_model)
app.command("eval")(evaluate_command)


@app.command()
def migrate(
    citus: bool = typer.Option(
        False, "--citus", help="Then distribute the tables on a Citus coordinator (deploy/citus/placement.sql)."
    ),
) -> None:
    """Create or upgrade every table (checkpointer, store, the service's own). Safe to run concurrently."""
    settings = common.load_settings(environment="dev")  # needs no token key

    async def _go() -> None:
        url = await resolve_database_url(settings)
        report = await run_migrations(url)
        applied = ", ".join(report.applied) or "nothing (already up to date)"
        typer.echo(f"migrated: {applied}")
        if citus:
            try:
                placed = await apply_placement(url)
            except CitusMissing as exc:
                common.fail(str(exc), 1)
            typer.echo(f"placed: {', '.join(placed) or 'nothing (every table already placed)'}")

    common.run(_go())


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    workers: int = typer.Option(1, min=1, help="Worker processes."),
) -> None:
    """Run one replica of the service."""
    settings = common.load_settings()  # fail fast, before uvicorn forks, on unsafe settings
    configure_logging(settings.log_level)
    with worker_metrics(workers):
        uvicorn.run(
            "chatbot.cli.worker:create_worker_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            # uvloop when installed (a dependency except on Windows), else asyncio's loop.
            loop="auto",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=int(settings.shutdown_grace_seconds),
            # Limits against slow or half-sent requests (docs/measurements/reliability.md): a request head
            # must arrive within the read timeout, idle connections close after the keep-alive.
            http=cast(
                Any, functools.partial(HeadDeadlineH11Protocol, head_timeout=settings.request_read_timeout_seconds)
            ),
            timeout_keep_alive=settings.keep_alive_seconds,
            limit_concurrency=settings.max_concurrency or None,
        )


@app.command()
def token(
    tenant: str = typer.Option(..., "--tenant", help="tenant_id claim.", callback=common.caller_id),
    user: str = typer.Option(..., "--user", help="user_id claim.", callback=common.caller_id),
    locale: str = typer.Option("fa-IR", help="locale claim."),
    ttl: int = typer.Option(3600, help="Seconds until the token expires."),
) -> None:
    """Mint a service token for trying the API by hand (uses the configured or dev secret)."""
    settings = common.load_settings(environment="dev")
    if settings.service_secret is None:
        settings = common.load_settings(environment="dev", service_secret=common.dev_secret(settings.data_dir))
    typer.echo(common.mint_token(settings, tenant=TenantId(tenant), user=UserId(user), locale=locale, ttl=ttl))


@app.command("erase-user")
def erase_user_command(
    tenant: str = typer.Option(..., "--tenant", callback=common.caller_id),
    user: str = typer.Option(..., "--user", callback=common.caller_id),
) -> None:
    """Erase a user's threads, memory and feedback in one tenant (the erasure endpoint's twin)."""
    from chatbot.ops.erasure import ErasureBusy, erase_user

    settings = common.load_settings(environment="dev")  # needs no token key

    async def _go() -> None:
        async with common.open_pool_and_locks(settings) as (pool, locks):
            try:
                report = await erase_user(pool, locks, TenantId(tenant), UserId(user))
            except ErasureBusy as exc:
                common.fail(f"not erased: {exc}", 3)
                return
        typer.echo(
            f"threads_deleted={report.threads_deleted} memory_items_deleted={report.memory_items_deleted} "
            f"feedback_deleted={report.feedback_deleted}"
        )
        if not (report.threads_deleted or report.memory_items_deleted or report.feedback_deleted):
            # Nothing left is what an erasure wants, so not a failure; but a mistyped id looks the same.
            typer.echo(
                f"nothing matched: tenant {tenant} holds no threads, memory or feedback of user {user} "
                "(already erased, or check --tenant and --user).",
                err=True,
            )

    common.run(_go())
