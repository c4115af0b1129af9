"""`chatbot check-model`: one tiny call per model the replica would use, one line each.

What goes wrong with a real provider is nearly always one of four things (it cannot be
reached, the key is refused, the model name is unknown, the model cannot answer in the
schema); each line says which, so an operator fixes the setting before the first user waits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import typer
from langchain_core.messages import HumanMessage, SystemMessage

from chatbot.cli import common
from chatbot.config import Settings

_PROBE = [
    SystemMessage("You answer in the JSON schema you are given. This is a connectivity check."),
    HumanMessage('Reply with status "answered", answer "ok" and no citations.'),
]


@dataclass(frozen=True, slots=True)
class Check:
    """One model's result: `ok`, or what is wrong."""

    role: str
    spec: str
    problem: str | None


def check_model() -> None:
    """Make one tiny structured call per chain entry (and the memory and summary models); exit 1 on any failure."""
    from chatbot.models.chain import ModelConfigError, load_models, parse_chain

    settings = common.load_settings(environment="dev")  # needs no token key
    try:
        parse_chain(settings.model)
        models = load_models(settings)
    except ModelConfigError as exc:
        # One line per entry still: which of them cannot even be built, and why.
        lines = unloadable(settings)
        for line in lines or [f"configuration error: {exc}"]:
            typer.echo(line)
        raise typer.Exit(1 if lines else 2) from None
    if not models.answer:
        typer.echo("offline: ok (no provider to check)")
        return
    roles = [(f"answer[{i}]", entry) for i, entry in enumerate(models.answer)]
    for role, entry in (("memory", models.memory), ("summary", models.summary)):
        if entry is not None and all(entry is not other for _, other in roles):
            roles.append((role, entry))
    timeout = settings.model_first_token_timeout_seconds

    async def _all() -> list[Check]:
        return list(await asyncio.gather(*(_check(role, entry, timeout) for role, entry in roles)))

    checks = common.run(_all())
    for check in checks:
        typer.echo(f"{check.role} {check.spec}: {check.problem or 'ok'}")
    if any(check.problem for check in checks):
        raise typer.Exit(1)


def unloadable(settings: Settings) -> list[str]:
    """Return one line per answer-chain entry when any cannot be built; [] when the chain itself is malformed."""
    from chatbot.models.chain import ModelConfigError, base_urls_for, load_model, parse_chain

    try:
        specs = parse_chain(settings.model)
    except ModelConfigError:
        return []
    lines = []
    urls = base_urls_for(specs, settings.model_base_url, settings.model_base_urls)
    for i, (spec, url) in enumerate(zip(specs, urls, strict=True)):
        try:
            load_model(spec, base_url=url)
        except ModelConfigError as exc:
            lines.append(f"answer[{i}] {spec}: {str(exc).removeprefix(spec + ': ')}")
        else:
            lines.append(f"answer[{i}] {spec}: not checked (another model cannot be loaded)")
    return lines


async def _check(role: str, entry: object, timeout: float) -> Check:
    from chatbot.agent.modelcall import StructuredAnswer, provider_status
    from chatbot.models.chain import ChainEntry
    from chatbot.models.structured import Limits, Streamed, StreamTimeout, stream_structured

    assert isinstance(entry, ChainEntry)
    state = Streamed()
    loop = asyncio.get_running_loop()
    limits = Limits(first_token=timeout, idle=timeout, deadline=loop.time() + timeout * 2)
    schema = StructuredAnswer.model_json_schema()
    try:
        await stream_structured(entry, _PROBE, schema, limits=limits, on_delta=lambda _: None, into=state)
    except StreamTimeout:
        return Check(role, entry.spec, f"no answer within {timeout:g} s")
    except Exception as exc:
        return Check(role, entry.spec, describe_failure(exc, provider_status(exc)))
    if state.stop(reports_finish=entry.reports_finish) != "normal":
        return Check(role, entry.spec, f"the answer stopped short (finish: {state.finish or 'none'})")
    if state.parsed() is None:
        return Check(role, entry.spec, "no structured output: the model did not answer in the JSON schema")
    return Check(role, entry.spec, None)


def describe_failure(exc: BaseException, status: int | None) -> str:
    """Return one line saying what a failed call means for the operator (never the provider's message)."""
    name = type(exc).__name__
    if status in (401, 403):
        return f"rejected key (HTTP {status}): check the provider's API key variable"
    if status == 404:
        return "unknown model or wrong base URL (HTTP 404)"
    if status == 429:
        return "rate limited (HTTP 429): the key works, the provider is refusing more calls now"
    if status == 400:
        return "request refused (HTTP 400): the model may not support structured output"
    if status is not None:
        return f"provider error (HTTP {status}, {name})"
    if "Connection" in name or "Connect" in name or "Timeout" in name:
        return f"unreachable ({name}): check the base URL and the network"
    return f"failed ({name})"
