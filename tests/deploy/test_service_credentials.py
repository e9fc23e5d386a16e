"""Every deployment gives each stage the Kafka user that deploy/acls.py grants its job, and a password of its own.

Compose is read as YAML (anchors and merge keys resolved, no engine needed); Kubernetes is the
Helm chart rendered with each value set that authenticates, when helm is installed (as
tests/deploy/test_helm_chart.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.acls import DEFAULT_USERS
from deploy.helm.validate import find_tools, render, value_sets

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "compose" / "compose.yaml"
COMPOSE_STAGES = {"agent": "agent", "agent-gpu": "agent", "correlator": "correlator", "sink": "sink",
                  "executor": "executor", "executor-slurm": "executor"}


def _compose_password(services: dict[str, Any], secrets: dict[str, Any], name: str) -> str:
    """Where a Compose service's Kafka password comes from: a Docker secret of its own (a file under
    /run/secrets, never the password in its environment), named in the service and filled from .env."""
    env = services[name]["environment"]
    assert "FAULTLINE_KAFKA_PASSWORD" not in env, name  # a password in the environment is what docker inspect shows
    path = env["FAULTLINE_KAFKA_PASSWORD_FILE"]
    assert path.startswith("/run/secrets/"), name
    secret = path.removeprefix("/run/secrets/")
    assert secret in services[name]["secrets"], name
    return str(secrets[secret]["environment"])


def test_compose_stages_log_in_as_their_own_users() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services: dict[str, Any] = compose["services"]
    secrets: dict[str, Any] = compose["secrets"]
    passwords: dict[str, str] = {}
    for name, service in COMPOSE_STAGES.items():
        env = services[name]["environment"]
        assert env["FAULTLINE_KAFKA_USERNAME"] == DEFAULT_USERS[service], name
        source = _compose_password(services, secrets, name)
        passwords.setdefault(service, source)
        assert source == passwords[service], name  # one user, one password
    assert len(set(passwords.values())) == len(passwords)  # no two services share a password
    topics = services["topics"]["environment"]
    assert topics["FAULTLINE_KAFKA_USERNAME"] == "${KAFKA_ADMIN_USER:-faultline-admin}"  # creating topics is the admin's
    assert _compose_password(services, secrets, "topics") == "KAFKA_ADMIN_PASSWORD"
    assert all(p.startswith("KAFKA_") and p.endswith("_PASSWORD") for p in passwords.values())  # from .env only


def _kubernetes(values: Path) -> list[dict[str, Any]]:
    tools = find_tools()
    if tools is None:
        pytest.skip("helm/kubeconform not installed (deploy/local/setup.sh --test builds them into .tools/bin)")
    return [o for o in yaml.safe_load_all(render(tools, values)) if o]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v.get("value") or v.get("valueFrom", {}).get("secretKeyRef", {}).get("key")
            for v in container.get("env", [])}


SASL_VALUE_SETS = [p for p in value_sets() if "PLAINTEXT\n" not in p.read_text()]
KUBERNETES_STAGES = {"agent": "agent", "jobsource": "agent", "correlator": "correlator", "sink": "sink",
                     "executor": "executor"}  # the job source publishes events, as the node agents do


@pytest.mark.parametrize("values", SASL_VALUE_SETS, ids=lambda p: p.name)
def test_kubernetes_stages_log_in_as_their_own_users(values: Path) -> None:
    objects = _kubernetes(values)
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("faultline-config"))
    assert "FAULTLINE_KAFKA_USERNAME" not in config["data"]  # no shared user to fall back on
    keys: dict[str, str] = {}
    for o in objects:
        if o["kind"] not in ("Deployment", "DaemonSet"):
            continue
        stage = o["metadata"]["name"].removeprefix("faultline-")
        spec = o["spec"]["template"]["spec"]
        env = _env(spec["containers"][0])
        assert env["FAULTLINE_KAFKA_USERNAME"] == DEFAULT_USERS[KUBERNETES_STAGES[stage]], stage
        keys[stage] = env["FAULTLINE_KAFKA_PASSWORD"]
        for init in spec.get("initContainers", []):
            if init["name"] == "topics":
                assert _env(init)["FAULTLINE_KAFKA_USERNAME"] == "faultline-admin", stage
                assert "FAULTLINE_KAFKA_PASSWORD" not in _env(init), stage  # a mounted file, its own Secret
                assert _env(init)["FAULTLINE_KAFKA_PASSWORD_FILE"].startswith("/run/secrets/kafka-admin/"), stage
    assert keys == {stage: f"kafka-password-{user}" for stage, user in KUBERNETES_STAGES.items() if stage in keys}
    assert {"agent", "jobsource", "correlator", "sink"} <= set(keys)
