"""The topic and partition plan: every declared topic, sized for a fleet, applied to any Kafka.

``faultline topics plan`` prints the plan with its arithmetic; ``faultline topics
apply [--dry-run]`` creates missing topics, raises partition counts and sets the
planned configs on the configured broker. Both start from
:data:`streams.topics.TOPICS` (suffix, key, model, declared partitions, cleanup,
retention) and add a sizing model with every assumption named in
:class:`Assumptions` (defaults: 10,000 GPUs sampled at 1 Hz).

The arithmetic, per topic
-------------------------

* **records/s** -- ``events``: what the node agents publish. NVML is sampled
  ``gpus x sample_hz`` times a second (*before* publish-on-change); the agent
  publishes a sample only when a reading moved past its tolerance
  (``change_share`` of the samples) or when the GPU's snapshot is due
  (``1 / snapshot_interval_s``), so *after* publish-on-change a GPU sends
  ``min(sample_hz, change_share x sample_hz + 1 / snapshot_interval_s)`` a
  second. Heartbeats (one per node per ``heartbeat_interval_s``), trainer
  lines and the rarer kernel/BMC/scheduler lines are added per node. The other
  topics follow from the incident rate.
* **bytes/record** -- the length of a real serialized record: an
  :class:`~streams.events.Event` made by the agent's own parser
  (:func:`producers.capture.parse_capture_line`) from a typical observation of
  each kind, or a decision model with typical contents, ``model_dump_json()``
  exactly as the producers send it. Kafka's record overhead is left out (small
  next to these sizes).
* **MB/s** -- records/s x bytes/record, steady and *peak*. The peak of
  ``events`` is the pre-publish-on-change rate: every GPU's every sample
  changes at once (a fleet-wide job start or stop), and the plan must hold it.
* **partitions** -- a partition is budgeted ``partition_mb_s`` of peak writes
  (uncompressed; a broker partition takes several times that) and, for the
  correlator's input, ``correlator_events_s`` of steady records (one Python
  process judges a partition; its engine alone was measured near 10,000
  events/s on one core, half of that is left for Faust, decoding and
  headroom). ``needed = ceil(peak MB/s / partition_mb_s)``.
* **retention bytes** -- steady MB/s x retention seconds / ``compression`` (lz4
  on the wire and on disk; measured ~11x on homogeneous samples, 4x assumed),
  per replica, and x ``replication`` across the cluster. A compacted topic
  keeps one record per key; it is given per year of incidents.

Two topics get fewer partitions than :mod:`streams.topics` declares, on
purpose (each says why in the plan):

* ``events`` -- **one partition per cell.** The correlator judges across nodes
  (a job's ranks, a rack, a power domain), so one engine must see every event
  of a *cell* (a set of nodes no job or rack crosses) in order; events are
  keyed by cell (:mod:`streams.cells`), so a cell never straddles partitions,
  and a worker taking over rebuilds its state one partition at a time
  (``correlators.rebuild.rebuild``), from the partition's newest state snapshot
  (``correlators.snapshots``), so a takeover replays at most the snapshot
  interval, not the retention. This plan sizes one cell per namespace, with
  one ``events`` partition, and says how many cells the fleet needs; a
  namespace may also hold several cells (``FAULTLINE_CELL``) over as many
  partitions, which the workers of its correlator group share (OPERATIONS.md).
* ``commands`` -- one partition: commands are keyed by command id but must be
  carried out in the order issued (fence *before* restart); one partition is
  the only order Kafka keeps across keys, and the rate is a few a minute.

``apply`` is idempotent: it only creates what is missing, raises partition
counts (Kafka cannot lower them: a topic with more partitions than planned is
reported, not touched), and sets the configs the plan names
(``cleanup.policy``, ``retention.ms``, ``min.insync.replicas``) where they
differ. The replication factor is the planned one, or the number of brokers
where the cluster has fewer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from streams.topics import TOPICS, TopicSpec, topic_name

__all__ = [
    "Action",
    "Assumptions",
    "Plan",
    "RecordLoad",
    "TopicPlan",
    "apply_plan",
    "make_plan",
    "record_sizes",
    "render_actions",
    "render_plan",
]

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
    replication: int = 3
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


def min_insync(replication: int) -> int:
    """``min.insync.replicas``: 2 with 3 replicas (one broker may be down), 1 with fewer."""
    return 2 if replication >= 3 else 1


# --------------------------------------------------------------------------- record sizes

_TS = "2026-04-22T03:00:41.956+00:00"
_GPU = {"index": 3, "uuid": "GPU-ca6fc2b7-ca57-71d0-eea0-627083a9c179", "pci_bus_id": "00000000:18:00.0"}
_OBSERVATIONS: dict[str, dict[str, Any]] = {
    "gpu_sample": {"ts": _TS, "source": "nvml", "node": "gpu-node-0017", "gpu": _GPU, "metrics": {
        "temperature_c": 61.5, "power_w": 612.3, "power_limit_w": 700.0, "utilization_pct": 98,
        "memory_used_mib": 71234, "memory_total_mib": 81559, "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0,
        "ecc_sbe_aggregate": 3, "ecc_dbe_aggregate": 0, "retired_pages_sbe": 0, "retired_pages_dbe": 0,
        "remapped_rows_pending": False, "remapped_rows_failure": False, "clocks_event_reasons": [],
        "pcie_replay_counter": 0}},
    "agent_heartbeat": {"ts": _TS, "source": "node_agent", "node": "gpu-node-0017", "alive": True},
    "train_step": {"ts": _TS, "source": "trainer", "job": "pretrain-70b-run-0042", "rank": 0,
                   "node": "gpu-node-0017", "event": "step", "step": 125_430, "loss": 1.9342,
                   "samples_per_s": 4215.7},
    "xid": {"ts": _TS, "source": "kernel", "node": "gpu-node-0017",
            "line": "NVRM: Xid (PCI:0000:18:00): 48, pid=2712, name=python, An uncorrectable double bit "
                    "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."},
}


def _decision_sizes() -> dict[str, int]:
    """Serialized sizes of typical decisions (real models, typical contents)."""
    from streams.decisions import Approval, Command, CommandResult, Culprit, DeadLetter, Incident, Target

    at = datetime(2026, 4, 22, 3, 0, 41, tzinfo=UTC)
    incident = Incident(
        id="inc-5f1c2a9e0b7d4c31", job="pretrain-70b-run-0042", category="gpu_memory_fault",
        culprit=Culprit(node="gpu-node-0017", gpus=[str(_GPU["uuid"])]), opened_at=at, severity="page",
        state="recovering", version=4, updated_at=at,
        summary="XID 48 double-bit ECC on gpu-node-0017 GPU 3; job restarted from step 125000 without it",
        evidence=[f"ev-{i:020x}" for i in range(6)], lost_gpu_hours=12.5)
    command = Command(
        id="cmd-3f2a9c41b8e07d55", incident=incident.id, type="restart_job",
        target=Target(job=incident.job, node="gpu-node-0017", gpu=str(_GPU["uuid"])), issued_at=at,
        params={"checkpoint": {"path": "/ckpt/pretrain-70b/step_125000", "step": 125_000}, "gpus": 1024,
                "exclude": {"nodes": [], "gpus": [["gpu-node-0017", str(_GPU["uuid"])]]}},
        reason="gpu_memory_fault: restart from the newest valid checkpoint without the failed GPU")
    result = CommandResult(command=command.id, status="done", at=at, executor="slurm",
                           detail="scontrol requeuehold 812345; ExcNodeList=gpu-node-0017; release")
    approval = Approval(command=command.id, decision="approve", by="alice", at=at,
                        reason="job checkpointed; reboot is safe")
    dead = DeadLetter(stage="agent", reason="kernel_log: line is not UTF-8", raw="x" * 300, at=at)
    return {name: len(model.model_dump_json().encode())
            for name, model in (("incident", incident), ("command", command), ("result", result),
                                ("approval", approval), ("deadletter", dead))}


def record_sizes() -> dict[str, int]:
    """Bytes of one serialized record of each kind the sizing uses (events through the agent's parser)."""
    from producers.capture import parse_capture_line

    sizes: dict[str, int] = {}
    for kind, obs in _OBSERVATIONS.items():
        events = [e for e in parse_capture_line(json.dumps(obs)) if e.body.kind == kind]
        if not events:
            raise RuntimeError(f"the parser made no {kind} event of its example observation")
        sizes[kind] = len(events[0].model_dump_json().encode())
    sizes.update(_decision_sizes())
    return sizes


# --------------------------------------------------------------------------- the plan


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


# --------------------------------------------------------------------------- apply


@dataclass(frozen=True)
class Action:
    """One thing ``apply`` did (or, in a dry run, would do) to one topic."""

    topic: str
    kind: Literal["create", "partitions", "config", "ok", "warn"]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind:<10} {self.topic}: {self.detail}"


@dataclass
class _Existing:
    partitions: dict[str, int] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)


def _existing(admin: AdminClient, names: list[str], timeout: float) -> _Existing:
    meta = admin.list_topics(timeout=timeout)
    found = _Existing()
    for name in names:
        t = meta.topics.get(name)
        if t is not None and t.error is None:
            found.partitions[name] = len(t.partitions)
    if found.partitions:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in found.partitions]
        for res, fut in admin.describe_configs(resources, request_timeout=timeout).items():
            entries = fut.result(timeout=timeout)
            found.configs[res.name] = {k: str(v.value) for k, v in entries.items()}
    return found


def _brokers(admin: AdminClient, timeout: float) -> int:
    return max(1, len(admin.list_topics(timeout=timeout).brokers))


def _wait(futures: Mapping[Any, Any], what: str, timeout: float, tolerate: str | None = None) -> None:
    """Wait for every admin future; ``tolerate`` names an error that means another apply got there first."""
    for key, fut in futures.items():
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            if tolerate is None or tolerate not in str(exc):
                raise RuntimeError(f"{what} {getattr(key, 'name', key)}: {exc}") from exc


def apply_plan(admin_conf: Mapping[str, Any], plan: Plan, *, dry_run: bool = False,
               timeout: float = 30.0) -> list[Action]:
    """Make the broker's topics match ``plan`` (see the module docstring); the actions, in order."""
    admin = AdminClient(dict(admin_conf))
    brokers = _brokers(admin, timeout)
    existing = _existing(admin, [t.name for t in plan.topics], timeout)
    actions: list[Action] = []
    create: list[NewTopic] = []
    grow: list[NewPartitions] = []
    alter: list[ConfigResource] = []
    short = sorted({t.replication for t in plan.topics if t.replication > brokers})
    if short:
        actions.append(Action("*", "warn", f"replication {brokers}, not {short[-1]}: the cluster has "
                                           f"{brokers} broker(s)"))
    for t in plan.topics:
        replication = min(t.replication, brokers)
        configs = {**t.configs, "min.insync.replicas": str(min_insync(replication))}
        if t.name not in existing.partitions:
            create.append(NewTopic(t.name, num_partitions=t.partitions, replication_factor=replication,
                                   config=configs))
            actions.append(Action(t.name, "create", f"{t.partitions} partitions, replication {replication}, "
                                                    + ", ".join(f"{k}={v}" for k, v in configs.items())))
            continue
        changed = False
        have = existing.partitions[t.name]
        if have < t.partitions:
            grow.append(NewPartitions(t.name, t.partitions))
            actions.append(Action(t.name, "partitions", f"{have} -> {t.partitions}"))
            changed = True
        elif have > t.partitions:
            actions.append(Action(t.name, "warn", f"has {have} partitions, the plan {t.partitions}: Kafka "
                                                  "cannot remove partitions (recreate the topic to shrink it)"))
        current = existing.configs.get(t.name, {})
        differ = {k: v for k, v in configs.items() if current.get(k) != v}
        if differ:
            alter.append(ConfigResource(ConfigResource.Type.TOPIC, t.name, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in differ.items()]))
            actions.append(Action(t.name, "config", ", ".join(f"{k}: {current.get(k)} -> {v}"
                                                               for k, v in differ.items())))
            changed = True
        if not changed:
            actions.append(Action(t.name, "ok", f"{have} partitions, configs as planned"))
    if not dry_run:
        if create:
            # Several stages apply the plan as they start: a topic another one just made is fine.
            _wait(admin.create_topics(create, operation_timeout=timeout, request_timeout=timeout),
                  "creating topic", timeout, tolerate="TOPIC_ALREADY_EXISTS")
        if grow:
            _wait(admin.create_partitions(grow, operation_timeout=timeout, request_timeout=timeout),
                  "adding partitions to", timeout)
        if alter:
            _wait(admin.incremental_alter_configs(alter, request_timeout=timeout), "setting configs of", timeout)
    return actions


def render_actions(actions: list[Action], dry_run: bool) -> str:
    """What ``apply`` did, one line per action, and a summary line."""
    changes = sum(1 for a in actions if a.kind in ("create", "partitions", "config"))
    verb = "would change" if dry_run else "changed"
    return "\n".join([*map(str, actions), f"{verb} {changes} thing(s); "
                      f"{sum(1 for a in actions if a.kind == 'ok')} topic(s) already as planned"])
