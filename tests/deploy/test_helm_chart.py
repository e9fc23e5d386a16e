"""The Kubernetes manifests: every overlay renders, every object passes kubeconform (strict, offline
schemas from kubernetes-validate), and the properties the deployment promises hold."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.kubernetes.validate import Tools, ensure_schemas, find_tools, overlays, render, validate

TOOLS = find_tools()
pytestmark = [
    pytest.mark.skipif(TOOLS is None, reason="kustomize/kubectl or kubeconform not installed "
                                             "(deploy/local/setup.sh builds them into .tools/bin with Go)"),
    pytest.mark.skipif(importlib.util.find_spec("kubernetes_validate") is None,
                       reason="kubernetes-validate (the offline schemas) not installed: pip install -e '.[dev]'"),
]

OVERLAYS = {p.name: p for p in overlays()}
METRICS_PORTS = {"agent": 9464, "correlator": 9465, "sink": 9466, "executor": 9467}  # common/metrics.py


def _tools() -> Tools:
    assert TOOLS is not None
    return TOOLS


@functools.cache
def _rendered(overlay: str) -> str:
    return render(_tools(), OVERLAYS[overlay])


def _objects(overlay: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(_rendered(overlay)) if o]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects
            if o["kind"] in ("Deployment", "DaemonSet")}


def test_there_are_overlays() -> None:
    assert {"dev", "production"} <= set(OVERLAYS)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_object_passes_kubeconform(overlay: str) -> None:
    summary = validate(_tools(), _rendered(overlay), ensure_schemas())
    objects = _objects(overlay)
    assert f"{len(objects)} resources found" in summary
    assert f"Valid: {len(objects)}, Invalid: 0, Errors: 0, Skipped: 0" in summary


def test_kubeconform_rejects_a_typo() -> None:
    """The check is strict: an unknown field fails (so the pass above means something)."""
    bad = _rendered("production").replace("readOnlyRootFilesystem: true", "readOnlyRootFilesystm: true", 1)
    with pytest.raises(RuntimeError, match="readOnlyRootFilesystm"):
        validate(_tools(), bad, ensure_schemas())


def test_agent_daemonset_runs_on_gpu_nodes_with_minimal_privileges() -> None:
    ds = _one(_objects("production"), "DaemonSet", "faultline-agent")
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert any(t["key"] == "faultline.io/quarantine" for t in spec["tolerations"])
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.present"
    assert spec["automountServiceAccountToken"] is False
    agent = spec["containers"][0]
    volumes = {v["name"]: v for v in spec["volumes"]}
    kmsg = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/dev/kmsg")
    assert kmsg["readOnly"] is True
    assert volumes[kmsg["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    sc = agent["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert "privileged" not in sc
    assert agent["resources"]["requests"] and agent["resources"]["limits"]
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(METRICS_PORTS["agent"])
    assert spec["initContainers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_executor_rbac_is_exactly_least_privilege() -> None:
    objects = _objects("production")
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    assert [r["metadata"]["name"] for r in roles] == ["faultline-executor"]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): sorted(r["verbs"]) for r in roles[0]["rules"]}
    assert rules == {
        (("",), ("nodes",)): ["get", "list", "patch"],
        (("",), ("pods",)): ["delete", "get", "list"],
        (("",), ("pods/eviction",)): ["create"],
    }
    binding = _one(objects, "ClusterRoleBinding", "faultline-executor")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "faultline-executor", "namespace": "faultline"}]
    specs = _pod_specs(objects)
    assert specs["faultline-executor"]["serviceAccountName"] == "faultline-executor"
    # only the executor gets an API token
    for name, spec in specs.items():
        assert spec.get("automountServiceAccountToken") is (name == "faultline-executor"), name


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_container_is_bounded_and_every_reference_resolves(overlay: str) -> None:
    objects = _objects(overlay)
    configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    secrets = {o["metadata"]["name"] for o in objects if o["kind"] == "Secret"} or {"faultline-secrets"}
    for name, spec in _pod_specs(objects).items():
        for c in spec.get("initContainers", []) + spec["containers"]:
            where = f"{name}/{c['name']}"
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], where
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, where
            for source in c.get("envFrom", []):
                assert source["configMapRef"]["name"] in configmaps, where
            for var in c.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] in secrets, where
        for v in spec.get("volumes", []):
            if "configMap" in v:
                assert v["configMap"]["name"] in configmaps, name
        if name != "faultline-agent":
            assert spec["securityContext"]["runAsNonRoot"] is True, name


def test_stages_are_scrapable_where_prometheus_looks() -> None:
    objects = _objects("production")
    specs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    prometheus = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "prometheus.yml"
    targets = prometheus.read_text() if prometheus.is_file() else ""
    for stage in ("correlator", "sink", "executor"):
        service = _one(objects, "Service", stage)
        assert service["spec"]["ports"][0]["port"] == METRICS_PORTS[stage]
        pod = specs[f"faultline-{stage}"]["spec"]["template"]
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(METRICS_PORTS[stage])
        env = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}
        assert env["FAULTLINE_METRICS_PORT"] == str(METRICS_PORTS[stage])  # the process serves it there
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        if targets:
            assert f"{stage}:{METRICS_PORTS[stage]}" in targets


def test_topics_are_applied_before_every_stage_and_correlators_are_standbys() -> None:
    objects = _objects("production")
    specs = _pod_specs(objects)
    for stage in ("correlator", "sink", "executor"):
        init = specs[f"faultline-{stage}"]["initContainers"][0]
        assert init["command"] == ["faultline", "topics", "apply"]
    correlator = _one(objects, "Deployment", "faultline-correlator")
    assert correlator["spec"]["replicas"] == 2
    env = {v["name"]: v.get("value") for v in specs["faultline-correlator"]["containers"][0]["env"]}
    assert env["FAULTLINE_LIVE_CLOCK"] == "true"  # a live worker: timers follow the wall clock too
    assert _one(objects, "PodDisruptionBudget", "faultline-correlator")["spec"]["maxUnavailable"] == 1
    sink = specs["faultline-sink"]["containers"][0]
    archive = next(v["value"] for v in sink["env"] if v["name"] == "FAULTLINE_ARCHIVE")
    assert "$(FAULTLINE_CLICKHOUSE_PASSWORD)" in archive and "dev-only" not in _rendered("production")


def test_dev_overlay_runs_without_gpus_and_executes_nothing() -> None:
    objects = _objects("dev")
    agent = _one(objects, "DaemonSet", "faultline-agent")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in agent and "affinity" not in agent
    executor = _one(objects, "Deployment", "faultline-executor")["spec"]["template"]["spec"]["containers"][0]
    assert executor["command"][-1] == "--dry-run"
