"""`chatbot dev`: everything a newcomer needs, in one command."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import typer
import uvicorn
from pydantic import SecretStr

from chatbot.cli import common
from chatbot.config import Settings

DEMO_TENANT = "acme"
DEMO_USER = "demo-user"
DEMO_KNOWLEDGE = Path("knowledge/demo")


def dev(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    knowledge: Path = typer.Option(DEMO_KNOWLEDGE, help="Sample knowledge base loaded for the demo tenant."),
    token_delay_ms: int = typer.Option(20, help="Pause between streamed tokens of the offline model."),
) -> None:
    """Start the embedded Postgres, migrate, load the sample knowledge base and serve."""
    from chatbot.app import create_app
    from chatbot.db.migrate import migrate
    from chatbot.db.pool import open_pool, resolve_database_url
    from chatbot.logs import configure_logging
    from chatbot.retrieval.ingest import ingest_paths

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
        url = await resolve_database_url(settings)
        await migrate(url)
        if await asyncio.to_thread(knowledge.exists):
            async with open_pool(settings.model_copy(update={"database_url": url})) as pool:
                report = await ingest_paths(pool, DEMO_TENANT, [knowledge])
            typer.echo(f"knowledge base {knowledge}: {report}")
        else:
            typer.echo(f"no knowledge base at {knowledge}: answers will ask for clarification")
        return url

    settings = settings.model_copy(update={"database_url": common.run(prepare())})
    bearer = common.mint_token(
        settings, tenant=DEMO_TENANT, user=DEMO_USER, locale="en-US", ttl=settings.jwt_max_lifetime_seconds
    )
    body = '{"message": {"content": "How do I file a car body claim and which documents do I need?"}}'
    typer.echo(
        "\nReady. Try it (token valid "
        f"{settings.jwt_max_lifetime_seconds // 60} min, the longest CHATBOT_JWT_MAX_LIFETIME_SECONDS allows;\n"
        "mint more with `.venv/bin/chatbot token --tenant acme --user u1`):\n\n"
        f"curl -N http://{host}:{port}/v1/threads/demo-1/runs \\\n"
        f"  -H {shlex.quote('Authorization: Bearer ' + bearer)} \\\n"
        f"  -H 'Content-Type: application/json' -d {shlex.quote(body)}\n"
    )
    typer.echo(
        "Or chat with it from another terminal (it signs its tokens with the same dev secret):\n\n"
        f".venv/bin/chatbot chat --url http://{host}:{port} --tenant {DEMO_TENANT} --user {DEMO_USER} --locale en-US\n"
    )
    uvicorn.run(create_app(settings), host=host, port=port, log_config=None, access_log=False)
