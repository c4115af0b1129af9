"""The deployment files: what can be checked without a container runtime."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import yaml
from prometheus_client.metrics import MetricWrapperBase
from typer.testing import CliRunner

from chatbot import metrics
from chatbot.cli.main import app
from chatbot.config import Settings

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def dockerfile_json(instruction: str) -> list[str]:
    """Return the exec-form arguments of the Dockerfile's last `instruction` (ENTRYPOINT, CMD)."""
    lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith(instruction + " ")]
    return json.loads(lines[-1].removeprefix(instruction + " "))


def assert_is_a_chatbot_command(args: list[str]) -> None:
    """The arguments parse as a `chatbot` command with these options (`--help` stops before running it)."""
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, (args, result.output)


def test_the_image_runs_chatbot_serve_as_a_non_root_user() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1\d-slim\s*$", text, re.MULTILINE)
    user = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert user and user[-1] not in ("root", "0")
    assert dockerfile_json("ENTRYPOINT") == ["chatbot"]
    command = dockerfile_json("CMD")
    assert command[0] == "serve"
    assert_is_a_chatbot_command(command)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["chatbot"] == "chatbot.cli.main:app"  # the entry point the image calls


def test_compose_has_postgres_a_one_shot_migrate_two_replicas_and_an_unbuffered_balancer() -> None:
    services = compose()["services"]
    assert "pgvector" in services["postgres"]["image"]
    migrate = services["migrate"]
    assert migrate["command"] == ["migrate"] and migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    replicas = [name for name, s in services.items() if s.get("command", [None])[0] == "serve"]
    assert replicas == ["chatbot-1", "chatbot-2"]
    for name in replicas:
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert services[name]["environment"]["CHATBOT_DATABASE_URL"].endswith("@postgres:5432/chatbot")
    for service in services.values():
        if service.get("build") == ".":
            assert_is_a_chatbot_command(service["command"])

    mounts = [volume.split(":") for volume in services["lb"]["volumes"]]
    config = next(ROOT / source for source, _, *_ in mounts if source.endswith("nginx.conf"))
    nginx = config.read_text()
    assert re.search(r"^\s*proxy_buffering off;", nginx, re.MULTILINE)
    upstream = set(re.findall(r"^\s*server (\S+):8000", nginx, re.MULTILINE))
    assert upstream == set(replicas)
    assert all(port.startswith("127.0.0.1:") for port in services["lb"]["ports"])


def test_the_operations_guide_names_every_service_setting_and_metric() -> None:
    for name in compose()["services"]:
        assert f"`{name}`" in OPERATIONS, name
    for field in Settings.model_fields:
        assert f"`CHATBOT_{field.upper()}`" in OPERATIONS, field
    exported = {
        next(iter(collector.describe())).name
        for collector in vars(metrics).values()
        if isinstance(collector, MetricWrapperBase)
    }
    assert "chatbot_runs" in exported
    for name in exported:
        shown = name + "_total" if f"`{name}_total`" in OPERATIONS else name
        assert f"`{shown}`" in OPERATIONS, name


def test_the_commands_the_guide_gives_exist() -> None:
    commands = re.findall(r"`(chatbot [^`]+)`", OPERATIONS)
    assert len(commands) >= 8
    for line in commands:
        # Placeholders (T, U, DATE, FILE) stand for values.
        assert_is_a_chatbot_command([a if not a.isupper() else "x" for a in shlex.split(line)[1:]])
