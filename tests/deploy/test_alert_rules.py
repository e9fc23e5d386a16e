"""The Prometheus configuration and alert rules: promtool checks them and runs their unit tests.

``promtool`` comes with Debian's ``prometheus`` package (``deploy/local/apt-packages.txt``, which
CI installs); without it the promtool tests skip, the others still run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import common.metrics
from common.metrics import (
    AGENT_METRICS,
    CONSUMER_LAG,
    DETECTION_TO_COMMAND,
    INCIDENTS_OPEN,
    METRICS_PORTS,
    observe_detection_to_command,
    set_consumer_lag,
    set_incidents_open,
)
from common.settings import REPO_ROOT

PROMETHEUS = REPO_ROOT / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian package `prometheus`, listed in deploy/local/apt-packages.txt)",
)


def _yaml(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PROMETHEUS / name).read_text())
    return data


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _yaml("alerts.yml")["groups"] for rule in group["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_rules_are_valid() -> None:
    done = _promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_config_is_valid() -> None:
    done = _promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_rule_unit_tests_pass() -> None:
    done = _promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    checks = [c for t in _yaml("alerts_test.yml")["tests"] for c in t.get("alert_rule_test", [])]
    for rule in _rules():
        mine = [c for c in checks if c["alertname"] == rule["alert"]]
        assert any(c.get("exp_alerts") for c in mine), f"{rule['alert']}: no test where it fires"
        assert any(not c.get("exp_alerts") for c in mine), f"{rule['alert']}: no test where it stays quiet"


def test_alerts_say_how_urgent_and_what_to_do() -> None:
    rules = _rules()
    assert len({r["alert"] for r in rules}) == len(rules)
    for rule in rules:
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


RUNBOOK_BASE = "https://github.com/faultline/faultline/blob/main/OPERATIONS.md"


def _anchors(markdown: str) -> set[str]:
    """The anchors a Markdown renderer (GitHub's rule) gives the headings of ``markdown``."""
    heads = re.findall(r"^#+ (.+)$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_every_alert_links_its_runbook_section_of_operations() -> None:
    anchors = _anchors((REPO_ROOT / "OPERATIONS.md").read_text())
    for rule in _rules():
        url = rule["annotations"].get("runbook_url", "")
        base, _, anchor = url.partition("#")
        assert base == RUNBOOK_BASE, f"{rule['alert']}: runbook_url {url!r}"
        assert anchor == rule["alert"].lower() and anchor in anchors, f"{rule['alert']}: no section #{anchor}"


def test_the_pipeline_has_alerts_for_lost_events_spool_backlog_and_sink_lag() -> None:
    exprs = {rule["alert"]: rule["expr"] for rule in _rules()}
    assert "faultline_producer_dropped_total" in exprs["AgentDroppingEvents"]
    assert "faultline_producer_spool_backlog_bytes" in exprs["AgentSpoolBacklog"]
    assert 'stage="sink"' in exprs["ArchiveSinkBehind"]


def test_exported_gpu_series_have_the_labels_declared() -> None:
    from producers.exported_metrics import GPU_LABELS

    for spec in AGENT_METRICS:
        if spec.name.startswith("faultline_gpu_"):
            assert spec.labels[:len(GPU_LABELS)] == GPU_LABELS, spec.name
    assert {"UUID", "modelName", "Hostname", "pci_bus_id"} <= set(GPU_LABELS)  # dcgm-exporter's join labels


def _exported_names() -> set[str]:
    """Every sample name faultline's metrics expose: the pipeline's collectors and the agent's."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names = {spec.name for spec in AGENT_METRICS}
    for value in vars(common.metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                names |= {family.name + s for s in suffixes[family.type]}
    return names


def test_alerts_use_metrics_faultline_exports() -> None:
    known = _exported_names()
    used = {name for rule in _rules() for name in re.findall(r"\bfaultline_\w+", rule["expr"])}
    assert used and used <= known, sorted(used - known)


def test_every_stage_is_scraped_on_its_port() -> None:
    config = _yaml("prometheus.yml")
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {c["job_name"]: c for c in config["scrape_configs"]}
    for stage, port in METRICS_PORTS.items():
        job = jobs[f"faultline-{stage}"]
        if "file_sd_configs" in job:
            files = [PROMETHEUS / f for sd in job["file_sd_configs"] for f in sd["files"]]
            targets = [t for f in files for group in yaml.safe_load(f.read_text()) for t in group["targets"]]
        else:
            targets = [t for sc in job["static_configs"] for t in sc["targets"]]
        assert targets and all(t.endswith(f":{port}") for t in targets), stage


def test_agent_metric_names_follow_prometheus_conventions() -> None:
    for spec in AGENT_METRICS:
        assert spec.name.startswith("faultline_") and spec.kind in ("gauge", "counter"), spec.name
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert "job" not in spec.labels, f"{spec.name}: `job` is the scrape job's label; use training_job"


# --------------------------------------------------------------------------- the metric helpers


def _sample(metric: MetricWrapperBase, suffix: str, **labels: str) -> float | None:
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == family.name + suffix and sample.labels == labels:
                return float(sample.value)
    return None


def test_detection_to_command_keeps_live_latencies_only() -> None:
    opened = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
    before = _sample(DETECTION_TO_COMMAND, "_count", type="quarantine_gpu") or 0.0
    assert observe_detection_to_command("quarantine_gpu", opened, opened + timedelta(seconds=42)) == 42.0
    assert observe_detection_to_command("quarantine_gpu", opened, opened - timedelta(seconds=1)) is None
    assert observe_detection_to_command("quarantine_gpu", opened, opened + timedelta(days=30)) is None  # a replay
    assert _sample(DETECTION_TO_COMMAND, "_count", type="quarantine_gpu") == before + 1


def test_open_incidents_and_lag_drop_to_zero_when_gone() -> None:
    set_incidents_open({("gpu_off_bus", "page"): 2, ("cuda_oom", "info"): 1})
    set_incidents_open({("cuda_oom", "info"): 3})
    assert _sample(INCIDENTS_OPEN, "", category="gpu_off_bus", severity="page") == 0
    assert _sample(INCIDENTS_OPEN, "", category="cuda_oom", severity="info") == 3
    set_consumer_lag("sink", {("ns.events", 0): 7, ("ns.commands", 0): -1})
    set_consumer_lag("sink", {("ns.commands", 0): 5})
    assert _sample(CONSUMER_LAG, "", stage="sink", topic="ns.events", partition="0") == 0
    assert _sample(CONSUMER_LAG, "", stage="sink", topic="ns.commands", partition="0") == 5
