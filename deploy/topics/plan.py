"""The plan itself: the sizing assumptions, each topic's load and partitions, and the plan as text.

The arithmetic is described in :mod:`deploy.topics`; the serialized record sizes it starts
from are measured in :mod:`deploy.topics.sizes`; the replication factor and
``min.insync.replicas`` follow :mod:`common.replication`, the rule every topic creator shares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from common.replication import PLANNED_REPLICATION, min_insync
from deploy.topics.sizes import record_sizes
from streams.topics import TOPICS, TopicSpec, topic_name

__all__ = ["PINNED", "Assumptions", "Plan", "RecordLoad", "TopicPlan", "make_plan", "min_insync", "render_plan"]

_MB = 1_000_000
_DAY_S = 86_400
_YEAR_DAYS = 365

#: Topics whose partition count the plan fixes whatever the load, with why.
PINNED: dict[str, tuple[int, str]] = {
    "events": (1, "one partition per cell: the correlator must see a whole cell in order; "
                  "scale out with more cells (namespaces here; or cells sharing a namespace's partitions)"),
    "commands": (1, "commands are carried out in the order issued (fence before restart); keys are "
                    "command ids, so only one partition keeps that order"),
}


@dataclass(frozen=True)
class Assumptions:
    """Everything the sizing assumes; each default is the reasoned figure for a 10,000-GPU fleet."""

    gpus: int = 10_000
    """GPUs in the fleet (one namespace = one cell unless the sizing says more cells)."""
    gpus_per_node: int = 8
    """HGX nodes: 8 GPUs each."""
    sample_hz: float = 1.0
    """NVML samples per GPU per second (agent ``nvml.interval_s: 1``)."""
    snapshot_interval_s: float = 60.0
    """A GPU is published at least this often, changed or not (``nvml.snapshot_interval_s``)."""
    change_share: float = 0.25
    """Share of samples past a tolerance on a busy training fleet (power swings > 5 % between
    compute and communication phases account for most); idle GPUs change far less."""
    heartbeat_interval_s: float = 15.0
    """One agent heartbeat per node this often (``heartbeat.interval_s``)."""
    trainer_lines_per_node_s: float = 0.5
    """Trainer reports: one reporting rank per node, a step line every 2 s."""
    other_lines_per_node_s: float = 0.05
    """Kernel, framework, BMC and scheduler lines per node per second, on average."""
    incidents_per_day: float = 200.0
    """Incidents opened per day across the fleet (job failures of every kind)."""
    versions_per_incident: float = 8.0
    """Versions published per incident over its lifecycle."""
    commands_per_incident: float = 5.0
    """Commands per incident (fence, restart, validate, ticket, notify...)."""
    approvals_per_day: float = 20.0
    """People's approvals and denials per day."""
    deadletter_share: float = 0.001
    """Share of events that are bad input and become dead letters."""
    partition_mb_s: float = 10.0
    """Write budget of one partition, MB/s of uncompressed records at peak."""
    correlator_events_s: float = 5_000.0
    """Events/s one correlator process judges (steady); the engine alone did ~10,000/s on one core."""
    rebuild_events_s: float = 10_000.0
    """Events/s a correlator replays when it takes a partition over (no publishing)."""
    snapshot_every_events: int = 50_000
    """``FAULTLINE_SNAPSHOT_EVERY_EVENTS``: a takeover replays at most this many events past the newest snapshot."""
    snapshot_every_s: float = 300.0
    """``FAULTLINE_SNAPSHOT_EVERY_S``: ...or this many seconds of them, whichever is fewer."""
    compression: float = 4.0
    """lz4 ratio on disk (measured ~11 on homogeneous GPU samples; 4 assumed)."""
    replication: int = PLANNED_REPLICATION
    """Replication factor of every topic (fewer where the cluster has fewer brokers)."""

    @property
    def nodes(self) -> int:
        """Nodes in the fleet."""
        return math.ceil(self.gpus / self.gpus_per_node)


@dataclass(frozen=True)
class RecordLoad:
    """One kind of record on a topic: its rate (steady and peak) and its serialized size."""

    what: str
    steady_per_s: float
    peak_per_s: float
    bytes: int
    formula: str

    @property
    def steady_mb_s(self) -> float:
        """Steady MB/s (10^6 bytes)."""
        return self.steady_per_s * self.bytes / _MB

    @property
    def peak_mb_s(self) -> float:
        """Peak MB/s (10^6 bytes)."""
        return self.peak_per_s * self.bytes / _MB


@dataclass(frozen=True)
class TopicPlan:
    """One topic: the declaration, the load, and what the plan makes of them."""

    spec: TopicSpec
    name: str
    loads: tuple[RecordLoad, ...]
    partitions: int
    needed_partitions: int
    reason: str
    retention_ms: int | None
    replication: int

    @property
    def steady_per_s(self) -> float:
        """Records/s, steady."""
        return sum(r.steady_per_s for r in self.loads)

    @property
    def peak_per_s(self) -> float:
        """Records/s at peak."""
        return sum(r.peak_per_s for r in self.loads)

    @property
    def steady_mb_s(self) -> float:
        """MB/s, steady."""
        return sum(r.steady_mb_s for r in self.loads)

    @property
    def peak_mb_s(self) -> float:
        """MB/s at peak."""
        return sum(r.peak_mb_s for r in self.loads)

    def retained_bytes(self, compression: float) -> float:
        """Bytes on one replica once the topic is full (compacted: one year of keys)."""
        if self.spec.cleanup == "compact":
            return self.steady_mb_s * _MB * _YEAR_DAYS * _DAY_S / compression
        assert self.retention_ms is not None
        return self.steady_mb_s * _MB * self.retention_ms / 1000 / compression

    @property
    def configs(self) -> dict[str, str]:
        """The topic configs ``apply`` sets (and keeps set)."""
        conf = {"cleanup.policy": self.spec.cleanup,
                "min.insync.replicas": str(min_insync(self.replication))}
        if self.retention_ms is not None:
            conf["retention.ms"] = str(self.retention_ms)
        return conf


@dataclass(frozen=True)
class Plan:
    """Every topic of one namespace, with the assumptions they were sized on."""

    namespace: str
    assumptions: Assumptions
    topics: tuple[TopicPlan, ...]
    cells: int
    """Cells (namespaces) the fleet needs so that each cell's events fit one partition and one correlator."""

    def topic(self, suffix: str) -> TopicPlan:
        """The plan of one topic, by suffix."""
        for t in self.topics:
            if t.spec.suffix == suffix:
                return t
        raise KeyError(suffix)

    def with_retention(self, suffix: str, retention_ms: int) -> Plan:
        """A copy with one topic's retention changed (what an operator's override does)."""
        topics = tuple(replace(t, retention_ms=retention_ms) if t.spec.suffix == suffix else t for t in self.topics)
        return replace(self, topics=topics)



def _loads(a: Assumptions, sizes: Mapping[str, int]) -> dict[str, tuple[RecordLoad, ...]]:
    """Records/s and bytes per topic suffix."""
    per_gpu = min(a.sample_hz, a.change_share * a.sample_hz + 1 / a.snapshot_interval_s)
    raw = a.gpus * a.sample_hz
    events = (
        RecordLoad("gpu_sample", a.gpus * per_gpu, raw, sizes["gpu_sample"],
                   f"{a.gpus} GPUs x min({a.sample_hz:g} Hz, {a.change_share:g} x {a.sample_hz:g} Hz + "
                   f"1/{a.snapshot_interval_s:g} s) = {a.gpus * per_gpu:,.0f}/s after publish-on-change; "
                   f"peak = every sample = {raw:,.0f}/s"),
        RecordLoad("agent_heartbeat", a.nodes / a.heartbeat_interval_s, a.nodes / a.heartbeat_interval_s,
                   sizes["agent_heartbeat"], f"{a.nodes} nodes / {a.heartbeat_interval_s:g} s"),
        RecordLoad("train_step", a.nodes * a.trainer_lines_per_node_s, a.nodes * a.trainer_lines_per_node_s,
                   sizes["train_step"], f"{a.nodes} nodes x {a.trainer_lines_per_node_s:g}/s"),
        RecordLoad("kernel/bmc/scheduler (xid-sized)", a.nodes * a.other_lines_per_node_s,
                   a.nodes * a.other_lines_per_node_s, sizes["xid"],
                   f"{a.nodes} nodes x {a.other_lines_per_node_s:g}/s"),
    )
    events_steady = sum(r.steady_per_s for r in events)
    day = float(_DAY_S)
    inc = a.incidents_per_day * a.versions_per_incident / day
    cmd = a.incidents_per_day * a.commands_per_incident / day
    return {
        "events": events,
        "incidents": (RecordLoad("incident version", inc, inc * 10, sizes["incident"],
                                 f"{a.incidents_per_day:g}/day x {a.versions_per_incident:g} versions; "
                                 "peak 10x"),),
        "commands": (RecordLoad("command", cmd, cmd * 10, sizes["command"],
                                f"{a.incidents_per_day:g}/day x {a.commands_per_incident:g}; peak 10x"),),
        "command-results": (RecordLoad("result", cmd, cmd * 10, sizes["result"],
                                       "one per command (per executor); peak 10x"),),
        "approvals": (RecordLoad("approval", a.approvals_per_day / day, a.approvals_per_day / day * 10,
                                 sizes["approval"], f"{a.approvals_per_day:g}/day; peak 10x"),),
        "deadletters": (RecordLoad("dead letter", events_steady * a.deadletter_share,
                                   events_steady * a.deadletter_share * 10, sizes["deadletter"],
                                   f"{a.deadletter_share:g} of {events_steady:,.0f} events/s; peak 10x"),),
        "control": (RecordLoad("replay marker", 0.0, 0.0, 64, "replays only"),),
        "heartbeats": (RecordLoad("stage heartbeat", (a.nodes + 8) / 15.0, (a.nodes + 8) / 15.0, 320,
                                  f"{a.nodes} agents and a few other stages / 15 s"),),
    }


def make_plan(namespace: str = "faultline", assumptions: Assumptions | None = None,
              sizes: Mapping[str, int] | None = None) -> Plan:
    """The plan of every declared topic of ``namespace`` for the fleet ``assumptions`` describe."""
    a = assumptions or Assumptions()
    loads = _loads(a, sizes or record_sizes())
    topics: list[TopicPlan] = []
    cells = 1
    for suffix, spec in TOPICS.items():
        topic_loads = loads.get(suffix, ())
        peak = sum(r.peak_mb_s for r in topic_loads)
        needed = max(1, math.ceil(peak / a.partition_mb_s))
        if suffix == "events":
            steady = sum(r.steady_per_s for r in topic_loads)
            needed = max(needed, math.ceil(steady / a.correlator_events_s))
            cells = needed
        if suffix in PINNED:
            partitions, reason = PINNED[suffix]
        elif needed > spec.partitions:
            partitions, reason = needed, f"peak load needs {needed} (declared {spec.partitions})"
        else:
            partitions, reason = spec.partitions, "as declared (the load needs fewer)"
        topics.append(TopicPlan(spec=spec, name=topic_name(namespace, suffix), loads=topic_loads,
                                partitions=partitions, needed_partitions=needed, reason=reason,
                                retention_ms=spec.retention_ms if spec.cleanup != "compact" else None,
                                replication=a.replication))
    return Plan(namespace=namespace, assumptions=a, topics=tuple(topics), cells=cells)


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def _duration(seconds: float) -> str:
    if seconds >= 2 * _DAY_S:
        return f"{seconds / _DAY_S:,.1f} days"
    if seconds >= 7200:
        return f"{seconds / 3600:,.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds:,.0f} s"


def render_plan(plan: Plan) -> str:
    """The plan as text, with the arithmetic behind every figure."""
    a = plan.assumptions
    out = [
        f"Topic plan for namespace {plan.namespace!r}: {a.gpus:,} GPUs ({a.nodes:,} nodes of {a.gpus_per_node}), "
        f"NVML at {a.sample_hz:g} Hz",
        f"Budgets: {a.partition_mb_s:g} MB/s per partition (peak, uncompressed); {a.correlator_events_s:,.0f} "
        f"events/s per correlator; lz4 {a.compression:g}x on disk; replication {a.replication}",
        "",
    ]
    for t in plan.topics:
        out.append(f"{t.name}  key={t.spec.key}  cleanup={t.spec.cleanup}")
        for r in t.loads:
            out.append(f"    {r.what}: {r.formula}")
            out.append(f"        {r.steady_per_s:,.2f}/s x {r.bytes} B = {r.steady_mb_s:.3f} MB/s steady, "
                       f"{r.peak_per_s:,.2f}/s -> {r.peak_mb_s:.3f} MB/s peak")
        out.append(f"    total {t.steady_per_s:,.2f} records/s, {t.steady_mb_s:.3f} MB/s steady; "
                   f"{t.peak_mb_s:.3f} MB/s peak")
        out.append(f"    partitions: ceil({t.peak_mb_s:.3f} / {a.partition_mb_s:g}) = "
                   f"{math.ceil(t.peak_mb_s / a.partition_mb_s) or 1}"
                   + (f", ceil({t.steady_per_s:,.0f} / {a.correlator_events_s:,.0f}) = "
                      f"{math.ceil(t.steady_per_s / a.correlator_events_s)}" if t.spec.suffix == "events" else "")
                   + f" needed -> {t.partitions} planned ({t.reason})")
        stored = t.retained_bytes(a.compression)
        if t.spec.cleanup == "compact":
            out.append(f"    retention: compacted (latest per key); grows ~{_bytes(stored)}/year per replica")
        else:
            assert t.retention_ms is not None
            days = t.retention_ms / 1000 / _DAY_S
            out.append(f"    retention: {days:g} days -> {t.steady_mb_s:.3f} MB/s x {days:g} d / "
                       f"{a.compression:g} = {_bytes(stored)} per replica, "
                       f"{_bytes(stored * t.replication)} with {t.replication} replicas")
        out.append(f"    configs: {', '.join(f'{k}={v}' for k, v in t.configs.items())}")
        out.append("")
    ev = plan.topic("events")
    assert ev.retention_ms is not None
    backlog = ev.steady_per_s * ev.retention_ms / 1000
    bound = min(a.snapshot_every_events, a.snapshot_every_s * ev.steady_per_s, backlog)
    burst = ev.peak_per_s - a.correlator_events_s
    out += [
        f"Cells: {plan.cells} (events need ceil(peak MB/s / partition budget) and ceil(steady events/s / "
        f"correlator budget) partitions; each cell is a namespace of one events partition).",
        f"Correlator burst: at peak {ev.peak_per_s:,.0f} events/s it falls behind by "
        f"{max(burst, 0):,.0f}/s; a 60 s burst drains in "
        f"{max(burst, 0) * 60 / max(a.correlator_events_s - ev.steady_per_s, 1):,.0f} s.",
        f"Takeover: a standby correlator restores the partition's newest state snapshot (every "
        f"{a.snapshot_every_events:,} events or {a.snapshot_every_s:g} s) and rebuilds at most the "
        f"{bound:,.0f} events after it at {a.rebuild_events_s:,.0f}/s = {_duration(bound / a.rebuild_events_s)}; "
        f"without snapshots (FAULTLINE_SNAPSHOT_EVERY_EVENTS=0) it rebuilds the whole retained partition: "
        f"{backlog:,.0f} events = {_duration(backlog / a.rebuild_events_s)}.",
    ]
    return "\n".join(out)

