"""The topic plan (deploy.topics): its arithmetic, and ``apply`` against a real broker."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from deploy.topics import PINNED, Assumptions, make_plan, record_sizes, render_plan
from deploy.topics import apply_plan as apply_topics
from faultline.cli import main
from producers.capture import parse_capture_line
from streams.topics import TOPICS

# --------------------------------------------------------------------------- arithmetic


def test_record_sizes_are_real_serialized_records() -> None:
    sizes = record_sizes()
    line = '{"ts":"2026-04-22T03:00:41.956+00:00","source":"node_agent","node":"gpu-node-0017","alive":true}'
    heartbeat = parse_capture_line(line)[0]
    assert sizes["agent_heartbeat"] == len(heartbeat.model_dump_json().encode())
    assert 400 < sizes["gpu_sample"] < 1500  # an NVML sample with every metric
    assert all(size > 100 for size in sizes.values())


def test_default_plan_is_sized_for_10k_gpus_at_1hz() -> None:
    plan = make_plan("faultline")
    a = plan.assumptions
    assert (a.gpus, a.sample_hz, a.nodes) == (10_000, 1.0, 1250)
    events = plan.topic("events")
    samples = events.loads[0]
    # before publish-on-change: every GPU every second; after: the changed share plus snapshots
    assert samples.peak_per_s == 10_000
    assert samples.steady_per_s == pytest.approx(10_000 * (0.25 + 1 / 60))
    assert events.steady_mb_s == pytest.approx(sum(r.steady_per_s * r.bytes for r in events.loads) / 1e6)
    assert events.peak_mb_s < a.partition_mb_s  # one partition holds the whole fleet's peak
    assert plan.cells == 1 and events.partitions == 1
    assert events.configs == {"cleanup.policy": "delete", "retention.ms": str(7 * 86_400_000),
                              "min.insync.replicas": "2"}
    retained = events.steady_mb_s * 1e6 * 7 * 86_400 / a.compression
    assert events.retained_bytes(a.compression) == pytest.approx(retained)


def test_every_declared_topic_is_planned_never_below_its_declaration_unless_pinned() -> None:
    plan = make_plan("ns")
    assert [t.spec.suffix for t in plan.topics] == list(TOPICS)
    for t in plan.topics:
        assert t.name == f"ns.{t.spec.suffix}"
        if t.spec.suffix in PINNED:
            assert t.partitions == PINNED[t.spec.suffix][0]
        else:
            assert t.partitions == max(t.spec.partitions, t.needed_partitions)
    incidents = plan.topic("incidents")
    assert incidents.configs["cleanup.policy"] == "compact" and "retention.ms" not in incidents.configs


def test_a_bigger_fleet_needs_more_cells_and_partitions() -> None:
    a = Assumptions(gpus=200_000, change_share=0.5)
    plan = make_plan("big", a)
    events = plan.topic("events")
    expected = max(math.ceil(events.peak_mb_s / a.partition_mb_s),
                   math.ceil(events.steady_per_s / a.correlator_events_s))
    assert plan.cells == expected > 1
    assert events.partitions == 1  # still one per cell: the cells are namespaces
    # an unpinned topic grows past its declaration when its peak needs it
    noisy = make_plan("noisy", replace(a, deadletter_share=0.5))
    dead = noisy.topic("deadletters")
    assert dead.partitions == dead.needed_partitions > TOPICS["deadletters"].partitions


def test_render_shows_the_arithmetic() -> None:
    text = render_plan(make_plan("faultline"))
    assert "10,000 GPUs (1,250 nodes of 8)" in text
    assert "10,000/s" in text and "after publish-on-change" in text
    assert "faultline.events" in text and "partitions: ceil(" in text
    assert "Takeover:" in text and "Cells: 1" in text


def test_cli_plan_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "plan", "--gpus", "2000"]) == 0
    out = capsys.readouterr().out
    assert "2,000 GPUs (250 nodes of 8)" in out and "faultline.events" in out


# --------------------------------------------------------------------------- apply


def _state(bootstrap: str, names: list[str]) -> dict[str, tuple[int, dict[str, str]]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=10)
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for name in names:
        if name not in meta.topics:
            continue
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        entries = admin.describe_configs([res])[res].result(timeout=10)
        out[name] = (len(meta.topics[name].partitions), {k: str(v.value) for k, v in entries.items()})
    return out


@pytest.mark.broker
def test_apply_creates_then_is_a_no_op_then_updates(kafka_bootstrap: str, unique_name: str) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    plan = make_plan(unique_name)
    names = [t.name for t in plan.topics]

    dry = apply_topics(conf, plan, dry_run=True)
    assert {a.kind for a in dry} >= {"create"} and _state(kafka_bootstrap, names) == {}

    first = apply_topics(conf, plan)
    assert sorted(a.topic for a in first if a.kind == "create") == sorted(names)
    state = _state(kafka_bootstrap, names)
    for t in plan.topics:
        partitions, configs = state[t.name]
        assert partitions == t.partitions
        assert configs["cleanup.policy"] == t.spec.cleanup
        assert configs["min.insync.replicas"] == "1"  # a one-broker cluster: replication 1
        if t.retention_ms is not None:
            assert configs["retention.ms"] == str(t.retention_ms)

    again = apply_topics(conf, plan)
    assert {a.kind for a in again} <= {"ok", "warn"}
    assert sum(a.kind == "ok" for a in again) == len(names)

    changed = plan.with_retention("commands", 3 * 86_400_000)
    grown = replace(changed, topics=tuple(replace(t, partitions=t.partitions + 2) if t.spec.suffix == "approvals"
                                          else t for t in changed.topics))
    third = apply_topics(conf, grown)
    kinds = {(a.topic.rsplit(".", 1)[1], a.kind) for a in third if a.kind not in ("ok", "warn")}
    assert kinds == {("commands", "config"), ("approvals", "partitions")}
    state = _state(kafka_bootstrap, names)
    assert state[f"{unique_name}.commands"][1]["retention.ms"] == str(3 * 86_400_000)
    assert state[f"{unique_name}.approvals"][0] == TOPICS["approvals"].partitions + 2

    # the original plan now has fewer approvals partitions than the broker: reported, never shrunk
    fourth = apply_topics(conf, plan)
    warned = [a for a in fourth if a.kind == "warn" and a.topic == f"{unique_name}.approvals"]
    assert warned and "cannot remove partitions" in warned[0].detail
    assert _state(kafka_bootstrap, [f"{unique_name}.approvals"])[f"{unique_name}.approvals"][0] == 3


@pytest.mark.broker
def test_cli_apply(kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAULTLINE_KAFKA", kafka_bootstrap)
    monkeypatch.setenv("FAULTLINE_NAMESPACE", unique_name)
    assert main(["topics", "apply", "--dry-run"]) == 0
    assert "would change" in capsys.readouterr().out
    assert _state(kafka_bootstrap, [f"{unique_name}.events"]) == {}
    assert main(["topics", "apply"]) == 0
    assert f"create     {unique_name}.events" in capsys.readouterr().out
    assert main(["topics", "apply"]) == 0
    assert "changed 0 thing(s)" in capsys.readouterr().out
