"""The Kubernetes manifests (deploy/k8s/): valid against the API's schemas, offline, and
holding what the service needs from its platform."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kubernetes_schemas
from pydantic import SecretStr

from chatbot.config import Settings
from tests.cli.test_deployment import assert_is_a_chatbot_command

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# The oldest Kubernetes the manifests are written for (`preStop.sleep` is there from 1.30 on).
KUBERNETES = "1.30.0"


def manifests() -> list[dict[str, Any]]:
    found = [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert found
    return found


def one(kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in manifests() if doc["kind"] == kind]
    return found


@pytest.mark.parametrize("doc", manifests(), ids=lambda doc: f"{doc['kind']}/{doc['metadata']['name']}")
def test_every_manifest_is_valid_for_kubernetes(doc: dict[str, Any]) -> None:
    # Strict: an unknown or misspelt field is an error, not silently dropped by the API server.
    kubernetes_schemas.validate(doc, KUBERNETES, strict=True)


def test_a_misspelt_field_is_caught() -> None:
    broken = one("Deployment")
    probe = broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["httpGett"] = probe.pop("httpGet")
    with pytest.raises(kubernetes_schemas.ValidationError):
        kubernetes_schemas.validate(broken, KUBERNETES, strict=True)


def test_the_migration_is_a_job_of_chatbot_migrate_on_a_direct_connection() -> None:
    job = one("Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    assert_is_a_chatbot_command(container["args"])
    (url,) = [env for env in container["env"] if env["name"] == "CHATBOT_DATABASE_URL"]
    assert url["valueFrom"]["secretKeyRef"]["key"] == "CHATBOT_LOCK_DATABASE_URL"  # not PgBouncer


def test_the_replicas_probe_ready_and_alive_and_drain_before_they_are_killed() -> None:
    deployment = one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "serve"
    assert_is_a_chatbot_command(container["args"])
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"  # a Postgres outage restarts nothing
    config = one("ConfigMap")["data"]
    grace = float(config["CHATBOT_SHUTDOWN_GRACE_SECONDS"])
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > grace + pause
    # The settings the pods get are ones the service accepts (an unknown value fails at start).
    secret = SecretStr(secrets.token_urlsafe(48))
    settings = Settings(**{k.removeprefix("CHATBOT_").lower(): v for k, v in config.items()}, service_secret=secret)
    assert settings.prepare_threshold is None  # behind PgBouncer in transaction mode
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_budget_and_the_service_select_the_replicas() -> None:
    labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    budget = one("PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert one("Service")["spec"]["selector"].items() <= labels.items()


def test_the_ingress_does_not_buffer_the_event_stream() -> None:
    ingress = one("Ingress")
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    keepalive = Settings.model_fields["sse_keepalive_seconds"].default
    assert float(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) > 3 * keepalive
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"]["name"] == one("Service")["metadata"]["name"]
