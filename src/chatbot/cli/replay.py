"""`chatbot replay --tenant T THREAD RUN`: print a run's record, what its model saw and said.

The same record as `GET /v1/threads/{thread_id}/runs/{run_id}` (threads/record.py), read
straight from the database, plus what only an operator needs: the system prompt's text,
the settings that shaped the window, and with `--system-message` the whole system message
rebuilt from its parts. Panels on a terminal, plain text through a pipe.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from chatbot.cli import common
from chatbot.ids import RunId, TenantId, ThreadId
from chatbot.timestamps import rfc3339

if TYPE_CHECKING:
    from chatbot.threads.record import ResolvedRun

Section = tuple[str, list[str]]


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def record_sections(run: ResolvedRun, *, system_message: bool = False) -> list[Section]:
    """Return a resolved run record as titled blocks of lines, in reading order."""
    body = run.body
    ctx = body.context
    lines = [
        f"run        {body.run_id}",
        f"thread     {body.thread_id}",
        f"status     {body.status}",
        f"created    {rfc3339(body.created_at)}",
        f"model      {body.model or '-'}",
    ]
    lines += [f"setting    {key} = {_value(value)}" for key, value in run.settings.items()]
    if run.shortened:
        lines.append(f"shortened  {', '.join(run.shortened)} (cut to fit the window)")
    sections: list[Section] = [("Run", lines)]
    sha = ctx.system_prompt_sha256
    if sha:
        sections.append((f"System prompt (sha256 {sha[:12]}…)", [run.system_prompt or "(text not stored)"]))
    sections.append(("Profile", [f"{k}: {_value(v)}" for k, v in ctx.profile.items()] or ["(none)"]))
    sections.append(("Facts", [f"- {fact}" for fact in ctx.facts] or ["(none)"]))
    sections.append(("Summary", [ctx.summary or "(none)"]))
    window = [f"[{m.role}] {m.id}\n{m.content}" for m in ctx.messages]
    sections.append((f"Window ({_count(len(window), 'message')} after the system message)", window or ["(none)"]))
    retrieved = [
        f"{c.chunk_id} v{c.version} ({c.document_id})\n{c.text if c.text is not None else '(pruned)'}"
        for c in ctx.retrieved
    ]
    sections.append((f"Retrieved ({_count(len(retrieved), 'chunk')})", retrieved or ["(none)"]))
    recalled = [f"[{m.role}] {m.id}\n{m.content}" for m in ctx.recalled]
    sections.append((f"Recalled ({_count(len(recalled), 'earlier turn')} of this thread)", recalled or ["(none)"]))
    if system_message:
        sections.append(("System message as sent", [run.system_message or "(cannot be rebuilt)"]))
    sections.append(("Input", [body.input.content if body.input else "(none)"]))
    sections.append(("Answer", [body.answer.content if body.answer else "(none)"]))
    sections.append(("Citations", body.citations or ["(none)"]))
    return sections


def render(sections: list[Section], console: Console) -> None:
    """Print the sections: panels on a terminal, plain headed blocks elsewhere."""
    for title, lines in sections:
        # Entries of several lines (messages, chunks) read better a blank line apart.
        text = ("\n\n" if any("\n" in line for line in lines) else "\n").join(lines)
        if console.is_terminal:
            console.print(Panel(Text(text), title=title, title_align="left"))
        else:
            console.print(f"== {title} ==", markup=False, highlight=False)
            console.print(text, markup=False, highlight=False, soft_wrap=True)
            console.print()


def _not_found(thread_id: ThreadId, run_id: RunId, tenant_id: TenantId) -> str:
    return (
        f"no run {run_id} on thread {thread_id} of tenant {tenant_id}: "
        "check the three ids (the run id is in the run's metadata event)."
    )


def replay(
    # Plain `str` on the command line (a NewType shows as `<chatbot.ids.ThreadId>` in --help).
    thread: str = typer.Argument(..., metavar="THREAD_ID", help="The thread (the backend's chat session id)."),
    run: str = typer.Argument(..., metavar="RUN_ID", help="The run's id (a UUID)."),
    tenant: str = typer.Option(..., "--tenant", help="Tenant the thread belongs to.", callback=common.caller_id),
    system_message: bool = typer.Option(False, "--system-message", help="Also print the whole system message."),
) -> None:
    """Print a run's record: window, summary, memory, prompt, retrieved chunks, answer."""
    from chatbot.threads.record import read_run_record
    from chatbot.threads.schemas import NOT_A_RUN, canonical_run_id

    settings = common.load_settings(environment="dev")  # needs no token key
    tenant_id, thread_id, run_id = TenantId(tenant), ThreadId(thread), RunId(run)
    canonical = canonical_run_id(run_id)  # the API's one rule: any other text names no run
    if canonical == NOT_A_RUN:
        common.fail(_not_found(thread_id, run_id, tenant_id))
        return

    async def _go() -> ResolvedRun | None:
        async with common.open_pool_and_locks(settings) as (pool, locks):
            return await read_run_record(pool, locks, thread_id, canonical, tenant_id)

    resolved = common.run(_go())
    if resolved is None:
        common.fail(_not_found(thread_id, run_id, tenant_id))
        return
    render(record_sections(resolved, system_message=system_message), Console())
