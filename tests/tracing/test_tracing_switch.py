"""Tracing is off unless configured: without it no span is made and the SDK is not needed; with it, spans go out."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chatbot.app import create_app
from tests.fixtures.postgres import settings_for

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What does travel insurance cover for medical costs abroad?"


def one_run(mode: str, database_url: str, **env: str) -> tuple[dict[str, Any], str]:
    """Run tests/tracing/one_run.py in a fresh interpreter; return its result and everything else it printed."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OTEL_"))}
    environment.update({"PYTHONPATH": str(ROOT), "CHATBOT_LOG_LEVEL": "WARNING", **env})
    done = subprocess.run(
        [sys.executable, "-m", "tests.tracing.one_run", mode, database_url],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    output, _, result = done.stdout.rpartition("RESULT ")
    return json.loads(result), output


def test_without_the_sdk_a_run_completes_when_tracing_is_off(migrated_database_url: str) -> None:
    # The standard OTLP variable alone does not turn tracing on (CHATBOT_TRACING does).
    result, _ = one_run("no-sdk", migrated_database_url, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert result == {"http_status": 200, "last_event": "end", "sdk_loaded": []}


def test_tracing_on_without_the_sdk_fails_at_start_up_saying_what_to_install(migrated_database_url: str) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-m", "tests.tracing.one_run", "no-sdk", migrated_database_url],
        cwd=ROOT,
        env={**environment, "PYTHONPATH": str(ROOT), "CHATBOT_TRACING": "console"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "pip install 'chatbot[tracing]'" in done.stderr


def test_with_tracing_off_no_run_span_reaches_an_installed_global_provider(migrated_database_url: str) -> None:
    result, _ = one_run("global-provider", migrated_database_url)
    assert result["http_status"] == 200 and result["last_event"] == "end"
    # FastAPI's own telemetry uses a global provider when there is one; the service's doesn't.
    assert "chatbot" not in result["scopes"]
    assert not {"chatbot.run", "load_memory", "retrieve", "generate"} & set(result["span_names"])


def test_console_tracing_exports_the_run_at_shutdown_without_its_text(migrated_database_url: str) -> None:
    result, printed = one_run("plain", migrated_database_url, CHATBOT_TRACING="console")
    assert result["http_status"] == 200 and result["last_event"] == "end"
    names = [line.split('"name": ')[1].strip(' ",') for line in printed.splitlines() if line.startswith('    "name": ')]
    assert {"chatbot.run", "load_memory", "retrieve", "generate"} <= set(names)
    assert '"service.name": "chatbot"' in printed
    assert "travel insurance" not in printed and "abroad" not in printed


def otlp_exporter_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


@pytest.mark.skipif(otlp_exporter_installed(), reason="the tracing extra is installed here")
def test_otlp_tracing_without_the_extra_fails_at_start_up_saying_what_to_install() -> None:
    with pytest.raises(RuntimeError, match=r"pip install 'chatbot\[tracing\]'"):
        create_app(settings_for("postgresql://127.0.0.1:1/unused", tracing="otlp"))
