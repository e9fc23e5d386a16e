"""The chart in a trial and in its stages' pods.

Rules: ``helm install`` with no values at all works (the passwords it is not given are generated,
kept across upgrades, and NOTES.txt says so loudly; production values generate none); every stage's
container has a readiness probe; the Kafka admin's password reaches only the topics init container,
as a file from a Secret volume of its own, never an environment variable and never a stage container.
"""

from __future__ import annotations

import base64
import importlib.util
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.helm.validate import CHART, Tools, ensure_schemas, find_tools, render, validate, value_sets

TOOLS = find_tools()
pytestmark = [
    pytest.mark.skipif(TOOLS is None, reason="helm or kubeconform not installed (deploy/local/setup.sh --test)"),
    pytest.mark.skipif(importlib.util.find_spec("kubernetes_validate") is None,
                       reason="kubernetes-validate (the offline schemas) not installed: pip install -e '.[dev]'"),
]
VALUES: dict[str, Path | None] = {"default": None, **{p.name.removesuffix("-values.yaml"): p for p in value_sets()}}
DEVELOPMENT = "faultline.io/development-only"


def _tools() -> Tools:
    assert TOOLS is not None
    return TOOLS


def _objects(values: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(render(_tools(), VALUES[values])) if o]


def _pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects
            if o["kind"] in ("Deployment", "DaemonSet")}


def test_the_chart_renders_with_no_values_generating_development_secrets() -> None:
    stream = render(_tools(), None)
    validate(_tools(), stream, ensure_schemas())
    secrets = {o["metadata"]["name"]: o for o in yaml.safe_load_all(stream) if o and o["kind"] == "Secret"}
    generated = {name for name, s in secrets.items() if s["metadata"].get("annotations", {}).get(DEVELOPMENT)}
    assert generated == {"faultline-kafka", "faultline-kafka-admin", "faultline-clickhouse"}
    stages = {k: base64.b64decode(v).decode() for k, v in secrets["faultline-kafka"]["data"].items()}
    assert set(stages) == {f"kafka-password-{u}" for u in ("agent", "correlator", "sink", "executor")}
    assert set(secrets["faultline-kafka-admin"]["data"]) == {"kafka-password-admin"}
    assert all(len(p) == 32 for p in stages.values()) and len(set(stages.values())) == len(stages)
    production = _objects("production")
    assert not [o for o in production if o["kind"] == "Secret"
                and o["metadata"].get("annotations", {}).get(DEVELOPMENT)]


@pytest.mark.parametrize("values", sorted(VALUES))
def test_every_stage_has_a_readiness_probe(values: str) -> None:
    for name, spec in _pods(_objects(values)).items():
        for container in spec["containers"]:
            probe = container.get("readinessProbe")
            assert probe and probe["httpGet"]["port"] == "metrics", f"{name}/{container['name']}"


@pytest.mark.parametrize("values", sorted(VALUES))
def test_only_the_topics_init_container_has_the_kafka_admin_password(values: str) -> None:
    objects = _objects(values)
    admin_secrets = {o["metadata"]["name"] for o in objects if o["kind"] == "Secret"
                     and "kafka-password-admin" in {**o.get("data", {}), **o.get("stringData", {})}}
    for name, spec in _pods(objects).items():
        admin_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v
                         and (v["secret"]["secretName"] in admin_secrets
                              or "kafka-password-admin" in [i["key"] for i in v["secret"].get("items", [])])}
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            where = f"{values}: {name}/{container['name']}"
            refs = [e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "secretKeyRef"
                    in e.get("valueFrom", {})]
            assert all(r["key"] != "kafka-password-admin" and r["name"] not in admin_secrets for r in refs), where
            mounted = {m["name"] for m in container.get("volumeMounts", [])} & admin_volumes
            if container["name"] != "topics":
                assert not mounted, where
            elif "FAULTLINE_KAFKA_USERNAME" in {e["name"] for e in container.get("env", [])}:
                assert mounted, where
                env = {e["name"]: e.get("value") for e in container["env"]}
                assert env["FAULTLINE_KAFKA_PASSWORD_FILE"].startswith("/run/secrets/kafka-admin/"), where
        for volume in spec.get("volumes", []):
            if volume["name"] in admin_volumes:
                assert [i["key"] for i in volume["secret"]["items"]] == ["kafka-password-admin"], name


def test_a_trial_installs_with_default_values_and_keeps_its_passwords(kube_apiserver: Any, tmp_path: Path) -> None:
    """``helm install`` against a real kube-apiserver (no values at all), then ``helm upgrade``: the
    generated passwords are the same after the upgrade, and NOTES.txt warns about them."""
    from kubernetes import client

    server = kube_apiserver
    cluster = ["--kube-apiserver", server.url, "--kube-ca-file", str(server.ca_file),
               "--kube-token", server.tokens["admin"], "--namespace", "trial"]
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HELM_CACHE_HOME": str(tmp_path / "cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "config"), "HELM_DATA_HOME": str(tmp_path / "data")}

    def helm(*args: str) -> str:
        done = subprocess.run([_tools().helm, *args, *cluster], capture_output=True, text=True, timeout=180, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    core = client.CoreV1Api(server.client())

    def password() -> str:
        secret = core.read_namespaced_secret("trial-faultline-kafka-admin", "trial")
        assert secret.data is not None
        return base64.b64decode(secret.data["kafka-password-admin"]).decode()

    # release "trial": the session's cluster already holds the ClusterRoles of a release "faultline"
    notes = helm("install", "trial", str(CHART), "--create-namespace")
    assert "WARNING: DEVELOPMENT SECRETS" in notes and "Kafka password of faultline-admin" in notes
    first = password()
    helm("upgrade", "trial", str(CHART))
    assert password() == first
    helm("uninstall", "trial")
