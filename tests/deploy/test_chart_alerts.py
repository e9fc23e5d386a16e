"""The pipeline's up-alerts work wherever faultline is scraped: under the Helm chart with any release
name, and under the plain Prometheus configuration (deploy/prometheus/prometheus.yml).

The rule is that ``CorrelatorDown``, ``ArchiveSinkDown`` and ``NodeAgentDown`` must select the ``up``
series the deployment's scrape configuration really produces. For the chart that is the Prometheus
Operator's labelling of a ServiceMonitor target (``job`` from the Service label its ``jobLabel``
names, else the Service's name; ``namespace``, ``service``, ``endpoint``, ``pod``, ``container``,
``instance``; plus any ``targetLabels``/``podTargetLabels``); for prometheus.yml it is the
``job_name`` and the target. Each case renders the rules and the scrape configuration, builds the
``up`` series of every target from them, and runs ``promtool test rules``: all up is quiet, a dead
correlator and a missing sink fire, one dead agent fires with that target's own labels.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.helm.validate import CHART, find_tools, render

PROMETHEUS = CHART.parents[1] / "prometheus"
PROMTOOL = shutil.which("promtool")
TOOLS = find_tools()
pytestmark = pytest.mark.skipif(PROMTOOL is None or TOOLS is None,
                                reason="promtool or helm not installed (deploy/local/setup.sh --test)")

Target = dict[str, str]
"""The labels of one target's ``up`` series."""

AGENT_NODES = 3


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def _chart_targets(objects: list[dict[str, Any]], namespace: str) -> dict[str, list[Target]]:
    """Every target the chart's ServiceMonitors scrape, by stage, labelled as the Operator labels it."""
    services = [o for o in objects if o["kind"] == "Service"]
    workloads = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    targets: dict[str, list[Target]] = {}
    for monitor in (o for o in objects if o["kind"] == "ServiceMonitor"):
        spec = monitor["spec"]
        for service in services:
            labels = service["metadata"].get("labels", {})
            if not _matches(spec["selector"]["matchLabels"], labels):
                continue
            stage = labels["app.kubernetes.io/component"]
            name = service["metadata"]["name"]
            job = labels.get(spec.get("jobLabel", ""), "") or name
            extra = {k.replace(".", "_").replace("/", "_").replace("-", "_"): labels[k]
                     for k in spec.get("targetLabels", []) if k in labels}
            for endpoint in spec["endpoints"]:
                port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
                for workload in workloads:
                    pod = workload["spec"]["template"]
                    if not _matches(service["spec"]["selector"], pod["metadata"]["labels"]):
                        continue
                    count = AGENT_NODES if workload["kind"] == "DaemonSet" else workload["spec"].get("replicas", 1)
                    container = next(c for c in pod["spec"]["containers"]
                                     if any(p.get("name") == port["targetPort"] for p in c.get("ports", [])))
                    pod_labels = {k.replace(".", "_").replace("/", "_").replace("-", "_"): pod["metadata"]["labels"][k]
                                  for k in spec.get("podTargetLabels", []) if k in pod["metadata"]["labels"]}
                    for i in range(count):
                        targets.setdefault(stage, []).append({
                            "job": job, "namespace": namespace, "service": name, "endpoint": endpoint["port"],
                            "pod": f"{workload['metadata']['name']}-{i}", "container": container["name"],
                            "instance": f"10.0.{len(targets)}.{i}:{port['port']}", **extra, **pod_labels})
    return targets


def _plain_targets() -> dict[str, list[Target]]:
    """Every target deploy/prometheus/prometheus.yml scrapes, by stage (``faultline-<stage>`` jobs)."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    targets: dict[str, list[Target]] = {}
    for job in config["scrape_configs"]:
        groups = [g for sd in job.get("file_sd_configs", []) for f in sd["files"]
                  for g in yaml.safe_load((PROMETHEUS / f).read_text())] + job.get("static_configs", [])
        stage = job["job_name"].removeprefix("faultline-")
        for group in groups:
            for address in group["targets"]:
                targets.setdefault(stage, []).append(
                    {"job": job["job_name"], "instance": address, **group.get("labels", {})})
    return targets


def _series(targets: dict[str, list[Target]], values: dict[str, str], drop: str = "") -> list[dict[str, str]]:
    """``up`` of every target: ``values[stage]`` (default all up), the first agent's from ``values['agent0']``."""
    out = []
    for stage, group in targets.items():
        if stage == drop:
            continue
        for i, labels in enumerate(group):
            body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            value = values.get("agent0" if stage == "agent" and i == 0 else stage, "1x40")
            out.append({"series": f"up{{{body}}}", "values": value})
    return out


def _expected(rules: list[dict[str, Any]], alert: str, labels: dict[str, str]) -> dict[str, Any]:
    """The alert ``alert`` as promtool should report it: ``labels`` and its annotations filled in from them."""
    rule = next(r for g in rules for r in g["rules"] if r.get("alert") == alert)
    annotations = {}
    for key, text in rule["annotations"].items():
        for name, value in labels.items():
            text = text.replace("{{ $labels." + name + " }}", value)
        assert "{{" not in text, f"{alert}.{key} names a label the series lack: {text}"
        annotations[key] = text
    return {"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": annotations}


def _check(targets: dict[str, list[Target]], rules: list[dict[str, Any]], tmp_path: Path) -> None:
    assert {"correlator", "sink", "agent"} <= set(targets), sorted(targets)
    quiet: list[dict[str, Any]] = [{"eval_time": "20m", "alertname": a, "exp_alerts": []}
             for a in ("CorrelatorDown", "ArchiveSinkDown", "NodeAgentDown")]
    dead_agent = targets["agent"][0]
    tests = [
        {"interval": "1m", "input_series": _series(targets, {}), "alert_rule_test": quiet},
        {"interval": "1m", "input_series": _series(targets, {"correlator": "0x40"}),
         "alert_rule_test": [{"eval_time": "5m", "alertname": "CorrelatorDown",
                              "exp_alerts": [_expected(rules, "CorrelatorDown", {})]}]},
        {"interval": "1m", "input_series": _series(targets, {}, drop="sink"),
         "alert_rule_test": [{"eval_time": "15m", "alertname": "ArchiveSinkDown",
                              "exp_alerts": [_expected(rules, "ArchiveSinkDown", {"job": "faultline-sink"})]}]},
        {"interval": "1m", "input_series": _series(targets, {"agent0": "0x40"}),
         "alert_rule_test": [{"eval_time": "15m", "alertname": "NodeAgentDown",
                              "exp_alerts": [_expected(rules, "NodeAgentDown", dead_agent)]}]},
    ]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rules}))
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                       "tests": tests}))
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("release", ["faultline", "prod", "ml-team-a"])
def test_the_charts_rules_fire_on_the_series_its_service_monitors_make(release: str, tmp_path: Path) -> None:
    assert TOOLS is not None
    stream = render(TOOLS, CHART / "ci" / "production-values.yaml", release=release)
    objects = [o for o in yaml.safe_load_all(stream) if o]
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    _check(_chart_targets(objects, "faultline"), rule["spec"]["groups"], tmp_path)


def test_the_plain_prometheus_configs_rules_fire_on_the_series_it_scrapes(tmp_path: Path) -> None:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    _check(_plain_targets(), rules, tmp_path)
