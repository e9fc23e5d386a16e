"""The Helm chart (deploy/helm/faultline): it lints, every value set renders and every object passes
kubeconform (strict, offline schemas from kubernetes-validate), and the properties the deployment
promises hold: keys and passwords only from Secrets, least-privilege RBAC, the job source in the
default install, alert rules from the one file promtool checks."""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from common.metrics import METRICS_PORTS
from common.settings import Settings
from deploy.helm.validate import CHART, Tools, ensure_schemas, find_tools, lint, render, validate, value_sets

TOOLS = find_tools()
pytestmark = [
    pytest.mark.skipif(TOOLS is None, reason="helm or kubeconform not installed "
                                             "(deploy/local/setup.sh --test builds them into .tools/bin with Go)"),
    pytest.mark.skipif(importlib.util.find_spec("kubernetes_validate") is None,
                       reason="kubernetes-validate (the offline schemas) not installed: pip install -e '.[dev]'"),
]

VALUES = {p.name.removesuffix("-values.yaml"): p for p in value_sets()}
REQUIRED = ("kafka.existingSecret=faultline-kafka", "clickhouse.existingSecret=faultline-clickhouse")
ALERTS = CHART.parents[1] / "prometheus" / "alerts.yml"
STAGES = ("correlator", "sink", "executor")


def _tools() -> Tools:
    assert TOOLS is not None
    return TOOLS


@functools.cache
def _rendered(values: str) -> str:
    if values == "default":  # the chart's own values, with the two Secrets it cannot make up
        return render(_tools(), None, *REQUIRED)
    return render(_tools(), VALUES[values])


def _objects(values: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(_rendered(values)) if o]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects
            if o["kind"] in ("Deployment", "DaemonSet")}


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in container.get("env", [])}


def test_there_are_value_sets() -> None:
    assert {"dev", "production", "scoped"} <= set(VALUES)


@pytest.mark.parametrize("values", ["default", *sorted(VALUES)])
def test_every_value_set_lints_and_every_object_passes_kubeconform(values: str) -> None:
    if values != "default":
        lint(_tools(), VALUES[values])
    summary = validate(_tools(), _rendered(values), ensure_schemas())
    objects = _objects(values)
    unchecked = sum(o["kind"] in ("ServiceMonitor", "PrometheusRule") for o in objects)
    assert f"{len(objects)} resources found" in summary
    assert f"Valid: {len(objects) - unchecked}, Invalid: 0, Errors: 0, Skipped: {unchecked}" in summary


def test_kubeconform_rejects_a_typo() -> None:
    """The check is strict: an unknown field fails (so the pass above means something)."""
    bad = _rendered("production").replace("readOnlyRootFilesystem: true", "readOnlyRootFilesystm: true", 1)
    with pytest.raises(RuntimeError, match="readOnlyRootFilesystm"):
        validate(_tools(), bad, ensure_schemas())


def test_every_stage_is_installed_by_default_the_job_source_included() -> None:
    objects = _objects("default")
    specs = _pod_specs(objects)
    assert set(specs) == {"faultline-agent", "faultline-jobsource", "faultline-correlator", "faultline-sink",
                          "faultline-executor"}
    jobsource = specs["faultline-jobsource"]
    assert jobsource["containers"][0]["command"] == ["faultline", "agent", "--config", "/etc/faultline/jobsource.yaml"]
    config = yaml.safe_load(_one(objects, "ConfigMap", "faultline-jobsource")["data"]["jobsource.yaml"])
    assert list(config["sources"]) == ["kubernetes"]
    assert config["sources"]["kubernetes"]["watch"] is True and config["sources"]["kubernetes"]["agent_gpus"]
    assert _one(objects, "Deployment", "faultline-jobsource")["spec"]["replicas"] == 1


def test_keys_and_passwords_come_from_secrets_only() -> None:
    for values in ("default", "production", "scoped"):
        objects = _objects(values)
        specs = _pod_specs(objects)
        correlator = _env(specs["faultline-correlator"]["containers"][0])
        for name in ("FAULTLINE_SIGNING_KEYS", "FAULTLINE_SNAPSHOT_KEY", "FAULTLINE_KAFKA_PASSWORD"):
            assert "secretKeyRef" in correlator[name]["valueFrom"], (values, name)
        if "faultline-executor" in specs:
            executor = _env(specs["faultline-executor"]["containers"][0])
            assert executor["FAULTLINE_SIGNING_KEYS"]["valueFrom"]["secretKeyRef"]["key"] == "signing-keys"
        for spec in specs.values():
            for c in spec.get("initContainers", []) + spec["containers"]:
                for var in c.get("env", []):
                    if any(w in var["name"] for w in ("PASSWORD", "KEY")) and not var["name"].endswith("_FILE"):
                        assert "value" not in var, (values, c["name"], var["name"])
                assert not any("password" in a.lower() or "secret" in a.lower() for a in c.get("command", []))
        for cm in (o for o in objects if o["kind"] == "ConfigMap"):
            text = yaml.safe_dump(cm["data"]).lower()
            assert "password" not in text and "signing" not in text, cm["metadata"]["name"]


@pytest.mark.parametrize("values", ["default", "production"])
def test_every_stage_gets_each_key_it_refuses_to_start_without(values: str) -> None:
    """A production worker or executor refuses to start without the keys ``Settings.required_keys`` names:
    the chart hands each of them over, from the keys Secret."""
    specs = _pod_specs(_objects(values))
    stages: tuple[tuple[str, Literal["worker", "executor"]], ...] = (
        ("faultline-correlator", "worker"), ("faultline-executor", "executor"))
    for pod, stage in stages:
        env = _env(specs[pod]["containers"][0])
        for name in Settings().required_keys(stage):
            assert name in env and "secretKeyRef" in env[name]["valueFrom"], (values, pod, name)


def test_the_keys_are_generated_and_kept_unless_a_secret_is_named() -> None:
    keys = _one(_objects("default"), "Secret", "faultline-keys")
    assert keys["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert set(keys["data"]) == {"signing-keys", "snapshot-key", "operator-keys", "executor-keys"}
    assert not [o for o in _objects("production") if o["kind"] == "Secret"]  # all three named, none made
    correlator = _env(_pod_specs(_objects("production"))["faultline-correlator"]["containers"][0])
    assert correlator["FAULTLINE_SNAPSHOT_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "faultline-keys"
    assert correlator["FAULTLINE_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "faultline-kafka", "key": "kafka-password-correlator"}


def test_sasl_without_a_password_secret_generates_development_ones() -> None:
    """A trial installs with no values (tests/deploy/test_helm_trial.py); the stages' Secret is then the
    chart's, and the admin's password has a Secret of its own."""
    objects = [o for o in yaml.safe_load_all(render(_tools(), None, "clickhouse.existingSecret=c")) if o]
    assert _one(objects, "Secret", "faultline-kafka")["metadata"]["annotations"]["faultline.io/development-only"]
    assert set(_one(objects, "Secret", "faultline-kafka-admin")["data"]) == {"kafka-password-admin"}


def test_agent_daemonset_runs_on_gpu_nodes_with_minimal_privileges() -> None:
    ds = _one(_objects("production"), "DaemonSet", "faultline-agent")
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert any(t["key"] == "faultline.io/quarantine" for t in spec["tolerations"])
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.present"
    assert spec["automountServiceAccountToken"] is False
    assert spec["priorityClassName"] == "system-node-critical"
    agent = spec["containers"][0]
    volumes = {v["name"]: v for v in spec["volumes"]}
    kmsg = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/dev/kmsg")
    assert kmsg["readOnly"] is True
    assert volumes[kmsg["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    sockets = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/var/lib/kubelet/pod-resources")
    assert sockets["readOnly"] is True  # the kubelet's PodResources socket, read only
    sc = agent["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert "privileged" not in sc
    assert agent["resources"]["requests"] and agent["resources"]["limits"]
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(METRICS_PORTS["agent"])
    assert spec["initContainers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    config = yaml.safe_load(_one(_objects("production"), "ConfigMap", "faultline-agent")["data"]["agent.yaml"])
    assert config["sources"]["kubelet_gpus"]["socket"] == "/var/lib/kubelet/pod-resources/kubelet.sock"


def _rules(role: dict[str, Any]) -> dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]]:
    return {(tuple(r["apiGroups"]), tuple(r["resources"])): sorted(r["verbs"]) for r in role["rules"]}


def test_rbac_is_exactly_least_privilege() -> None:
    objects = _objects("production")
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    assert set(roles) == {"faultline-executor", "faultline-jobsource"}
    kubeflow = ("pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mxjobs")
    assert _rules(roles["faultline-executor"]) == {  # sinks/executors/kubernetes.py's table
        (("",), ("nodes",)): ["get", "list", "patch"],
        (("",), ("nodes/status",)): ["patch"],
        (("",), ("events",)): ["create"],
        (("",), ("pods",)): ["delete", "list", "patch"],
        (("",), ("pods/eviction",)): ["create"],
        (("batch",), ("jobs",)): ["delete", "get", "list"],
        (("kubeflow.org",), kubeflow): ["get"],
        (("jobset.x-k8s.io",), ("jobsets",)): ["get"],
        (("leaderworkerset.x-k8s.io",), ("leaderworkersets",)): ["get"],
        (("resource.k8s.io",), ("resourceslices",)): ["list"],
        (("resource.k8s.io",), ("devicetaintrules",)): ["create", "delete", "list"],
    }
    assert _rules(roles["faultline-jobsource"]) == {  # read only
        (("",), ("pods", "nodes")): ["list", "watch"],
        (("batch",), ("jobs",)): ["get"],
        (("kubeflow.org",), kubeflow): ["get"],
        (("jobset.x-k8s.io",), ("jobsets",)): ["get"],
        (("resource.k8s.io",), ("resourceclaims",)): ["get"],  # DRA pods' GPUs (jobSource.draDriver)
        (("resource.k8s.io",), ("resourceslices",)): ["list"],
    }
    for stage in ("executor", "jobsource"):
        binding = _one(objects, "ClusterRoleBinding", f"faultline-{stage}")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"faultline-{stage}",
                                        "namespace": "faultline"}]
    specs = _pod_specs(objects)
    assert specs["faultline-executor"]["serviceAccountName"] == "faultline-executor"
    # only the executor and the job source get an API token
    for name, spec in specs.items():
        assert spec.get("automountServiceAccountToken") is (name in ("faultline-executor", "faultline-jobsource")), name
    # patch on pods is narrowed to the checkpoint annotations by an admission policy bound to the executor's account
    policy = _one(objects, "ValidatingAdmissionPolicy", "faultline-executor-pod-writes")["spec"]
    assert policy["failurePolicy"] == "Fail" and policy["matchConstraints"]["resourceRules"][0]["resources"] == ["pods"]
    assert '== "system:serviceaccount:faultline:faultline-executor"' in policy["matchConditions"][0]["expression"]
    assert _one(objects, "ValidatingAdmissionPolicyBinding", "faultline-executor-pod-writes")["spec"][
        "validationActions"] == ["Deny"]


@pytest.mark.parametrize("values", ["default", *sorted(VALUES)])
def test_every_container_is_bounded_and_every_reference_resolves(values: str) -> None:
    objects = _objects(values)
    configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    if values == "default":
        named = {s.split("=")[1] for s in REQUIRED}  # the Secrets the render was told exist
    else:
        wanted = yaml.safe_load(VALUES[values].read_text())
        named = {(wanted.get(k) or {}).get("existingSecret") or "" for k in ("kafka", "keys", "clickhouse")}
    secrets = {o["metadata"]["name"] for o in objects if o["kind"] == "Secret"} | (named - {""})
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
    for stage in STAGES:
        service = _one(objects, "Service", f"faultline-{stage}")
        assert service["spec"]["ports"][0]["port"] == METRICS_PORTS[stage]
        pod = specs[f"faultline-{stage}"]["spec"]["template"]
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(METRICS_PORTS[stage])
        env = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}
        assert env["FAULTLINE_METRICS_PORT"] == str(METRICS_PORTS[stage])  # the process serves it there
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert service["spec"]["ports"][0]["name"] == "metrics"
    monitor = _one(objects, "ServiceMonitor", "faultline")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    services = [o for o in objects if o["kind"] == "Service"]
    assert len(services) == 5 and all(monitor["spec"]["selector"]["matchLabels"].items()
                                      <= s["metadata"]["labels"].items() for s in services)


def test_the_prometheus_rule_is_the_alert_file_promtool_checks(tmp_path: Path) -> None:
    rule = _one(_objects("production"), "PrometheusRule", "faultline")
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    promtool = shutil.which("promtool")
    if promtool:  # the rendered rules, checked like the file itself
        out = tmp_path / "rendered-rules.yml"
        out.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        done = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (CHART / "files" / "alerts.yml").is_symlink()  # read from deploy/prometheus, never copied


@pytest.mark.parametrize("release", ["faultline", "prod", "ml-team-a"])
def test_the_alert_rules_select_the_jobs_the_chart_scrapes_under_any_release_name(release: str) -> None:
    """Prometheus Operator names a target's ``job`` after the Service label the ServiceMonitor's
    ``jobLabel`` names, else after the Service: the rules' ``job="..."`` must be among those names whatever
    the release is called, or ``CorrelatorDown`` (an ``absent()``) fires forever and ``NodeAgentDown`` never."""
    objects = [o for o in yaml.safe_load_all(render(_tools(), VALUES["production"], release=release)) if o]
    monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
    job_label = monitor["spec"].get("jobLabel")
    scraped = {(s["metadata"]["labels"].get(job_label) if job_label else None) or s["metadata"]["name"]
               for s in objects if s["kind"] == "Service"
               and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()}
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    selected = set(re.findall(r'job="([^"]+)"', yaml.safe_dump(rule["spec"]["groups"])))
    assert {"faultline-correlator", "faultline-sink", "faultline-agent"} <= selected
    assert selected <= scraped, f"release {release!r}: rules select {sorted(selected - scraped)}, scraped {sorted(scraped)}"


def test_topics_are_applied_before_every_stage_and_correlators_are_standbys() -> None:
    objects = _objects("production")
    specs = _pod_specs(objects)
    for stage in (*STAGES, "jobsource"):
        init = specs[f"faultline-{stage}"]["initContainers"][0]
        assert init["command"] == ["faultline", "topics", "apply"]
        assert _env(init)["FAULTLINE_KAFKA_USERNAME"]["value"] == "faultline-admin"
        assert "FAULTLINE_KAFKA_PASSWORD" not in _env(init)  # a file of its own (test_helm_trial.py)
    correlator = _one(objects, "Deployment", "faultline-correlator")
    assert correlator["spec"]["replicas"] == 2
    env = {v["name"]: v.get("value") for v in specs["faultline-correlator"]["containers"][0]["env"]}
    assert env["FAULTLINE_LIVE_CLOCK"] == "true"  # a live worker: timers follow the wall clock too
    assert _one(objects, "PodDisruptionBudget", "faultline-correlator")["spec"]["maxUnavailable"] == 1
    sink = specs["faultline-sink"]["containers"][0]
    archive = next(v["value"] for v in sink["env"] if v["name"] == "FAULTLINE_ARCHIVE")
    assert "$(FAULTLINE_CLICKHOUSE_PASSWORD)" in archive and "dev-only" not in _rendered("production")
    scoped = _pod_specs(_objects("scoped"))
    assert not [c for s in scoped.values() for c in s.get("initContainers", []) if c["name"] == "topics"]


def test_dev_values_run_without_gpus_and_execute_nothing() -> None:
    objects = _objects("dev")
    agent = _one(objects, "DaemonSet", "faultline-agent")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in agent and "affinity" not in agent
    executor = _one(objects, "Deployment", "faultline-executor")["spec"]["template"]["spec"]["containers"][0]
    assert executor["command"][-1] == "--dry-run"
    config = yaml.safe_load(_one(objects, "ConfigMap", "faultline-jobsource")["data"]["jobsource.yaml"])
    labels = config["sources"]["kubernetes"]["job_labels"]
    assert labels == ["faultline.io/job"]  # one list, handed to both ends
    assert executor["command"][executor["command"].index("--job-label") + 1] == labels[0]
    assert "FAULTLINE_KAFKA_PASSWORD" not in _env(executor)  # plaintext Kafka: no credentials at all


def test_a_scoped_release_watches_one_namespace_and_pins_the_image() -> None:
    objects = _objects("scoped")
    config = yaml.safe_load(_one(objects, "ConfigMap", "faultline-jobsource")["data"]["jobsource.yaml"])
    assert config["sources"]["kubernetes"]["namespace"] == "team-a"
    assert config["sources"]["kubernetes"]["qualify_namespace"] is True
    assert "faultline-executor" not in _pod_specs(objects)
    images = {c["image"] for s in _pod_specs(objects).values() for c in s["containers"]}
    assert len(images) == 1 and next(iter(images)).startswith("registry.example.com/faultline/faultline@sha256:")


@pytest.mark.parametrize("values", ["default", *sorted(VALUES)])
def test_the_rendered_agent_and_job_source_configs_are_valid(values: str, tmp_path: Path) -> None:
    """The configs the chart writes load, and each source's section validates (as test_compose.py
    checks the configs the other deployments ship)."""
    from pydantic import ValidationError

    from producers.agent import load_config
    from producers.registry import SourceContext, load_factory

    maps = {o["metadata"]["name"]: o["data"] for o in _objects(values) if o["kind"] == "ConfigMap"}
    for name, key in (("faultline-agent", "agent.yaml"), ("faultline-jobsource", "jobsource.yaml")):
        path = tmp_path / key
        path.write_text(maps[name][key].replace("node: NODE_NAME", "node: gpu-node-01"))
        config = load_config(path)
        assert config.sources and config.metrics_port == 9464
        ctx = SourceContext(node="gpu-node-01", state_dir=tmp_path)
        for section, settings in config.sources.items():
            try:
                source = load_factory(section)(ctx, settings)
            except ValidationError as exc:
                pytest.fail(f"{name}: sources.{section}: {exc}")
            except Exception:
                continue  # not a config error: a device, a socket or an API this machine lacks
            if source is not None:
                source.close()
