"""An incident as the correlator keeps it while it is open."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from correlators.attribution import CollectiveReports
from correlators.bounded import bounded_incident
from correlators.gate_round import GateRound
from correlators.state_fields import Instant
from streams.decisions import Culprit, Fault, GateExclusion, GateWait, Incident, RestartGate

__all__ = ["ACTIVE", "OpenIncident", "OtherFault", "stable_id"]


def stable_id(prefix: str, *parts: object) -> str:
    """A deterministic id: the same decision on the same input gives the same id."""
    h = hashlib.sha256("|".join("" if p is None else str(p) for p in parts).encode()).hexdigest()
    return f"{prefix}-{h[:16]}"


#: The states in which an incident is still being acted on (the lifecycle refines it; a failure joins it).
ACTIVE = ("open", "mitigating", "restarting", "awaiting_approval")


@dataclass
class OtherFault:
    """Hardware of another cause found while the incident was open: a second culprit, fenced by its own rule."""

    category: str
    node: str
    gpus: set[int] = field(default_factory=set)
    reason: str = ""
    ts: Instant | None = None
    id: str = ""  # its own incident's public id (correlators.root_causes): one incident per job and root cause
    fenced_by: str = ""  # ...or the incident whose fence already held this hardware for this cause: that one is its


@dataclass
class OpenIncident:
    id: str
    job: str | None
    category: str
    opened_at: Instant
    severity: str
    node: str | None = None
    gpus: set[int] = field(default_factory=set)
    state: str = "open"
    version: int = 0
    updated_at: Instant | None = None
    summary: str = ""
    evidence: list[str] = field(default_factory=list)
    reports: CollectiveReports = field(default_factory=CollectiveReports)
    issued: set[str] = field(default_factory=set)  # command ids already issued
    restart_attempts: int = 0
    restored_step: int | None = None
    baseline_throughput: float | None = None
    baseline_gpus: int | None = None  # the run's size when the baseline was measured (an elastic job may shrink)
    lost_gpu_hours: float | None = None
    settle_deadline: Instant | None = None
    held: bool = False  # a failure whose cause is still being judged: not published, no commands yet
    more: dict[str, set[int]] = field(default_factory=dict)  # further hardware of the same cause: node -> GPUs
    earlier_nodes: set[str] = field(default_factory=set)  # culprit nodes of earlier rounds (before a reopen)
    ref: int = 0  # its key in the engine's state (EngineState.hold); ids are public, refs are internal
    others: list[OtherFault] = field(default_factory=list)  # second culprits of other causes (issue: every fault)
    gate: GateRound | None = None  # the restart gate of the current round
    avoided_nodes: set[str] = field(default_factory=set)  # what the last restart excluded (fenced or not)
    avoided_gpus: dict[str, set[int]] = field(default_factory=dict)
    fence_breaches: int = 0  # times the scheduler started the job again on hardware this incident fenced
    load_failures: int = 0  # restarts in a row whose checkpoint did not load
    verify_ok_since: Instant | None = None  # the recovered run at its pre-failure throughput since
    verify_short_since: Instant | None = None  # ...or below it since (stepping, but slowly)
    run: int = 0  # which run of the job failed (Job.starts when the incident opened)
    reran: Instant | None = None  # when the job first ran again after this incident's restart
    restart_from: int | None = None  # the checkpoint step (and path) the last restart asked for
    restart_path: str | None = None
    told_at: Instant | None = None  # when its owner was last told of it (a notify of its current facts)
    tell_at: Instant | None = None  # ...and when the next one may go, if a change waits for it (rate limit)

    def hardware(self) -> list[tuple[str, set[int]]]:
        """Every (node, GPU indices) this incident blames for its category: the culprit first, then the rest."""
        out = [(self.node, self.gpus)] if self.node else []
        return out + [(n, g) for n, g in sorted(self.more.items()) if n != self.node]

    def other(self, category: str, node: str) -> OtherFault | None:
        return next((o for o in self.others if o.category == category and o.node == node), None)

    def avoided(self, node: str | None, gpus: set[int]) -> bool:
        """Did the last restart already leave this hardware out (the whole node, or every one of the GPUs)?"""
        if node is None:
            return False
        return node in self.avoided_nodes or (bool(gpus) and gpus <= self.avoided_gpus.get(node, set()))

    def blame(self, node: str | None, gpus: set[int]) -> bool:
        """Add hardware of the same cause; True when it is new."""
        if node is None:
            return False
        if self.node is None:
            self.node, self.gpus = node, set(gpus)
            return True
        have = self.gpus if node == self.node else self.more.get(node)
        if have is None:
            self.more[node] = set(gpus)
            return True
        if gpus <= have:
            return False
        have |= gpus
        return True

    def add_evidence(self, event_id: str | None) -> None:
        if event_id and event_id not in self.evidence and len(self.evidence) < 200:
            self.evidence.append(event_id)

    def to_model(self, gpu_ids: list[str], gpu_id: Callable[[str, int], str] | None = None,
                 summary: str | None = None) -> Incident:
        """The published version, within the record cap (:mod:`correlators.bounded`); ``gpu_id(node, index)``
        names GPUs of the other faults and of the gate."""
        name = gpu_id or (lambda n, i: f"{n}:{i}")
        gate = None
        g = self.gate
        if g is not None and ((not g.passed and g.waiting) or (g.passed and g.restarted)):
            gate = RestartGate(
                state="passed" if g.passed else "waiting", failure_at=g.failure_at, bound=g.bound,
                waiting=[GateWait(node=w.node, gpu=None if w.gpu is None else name(w.node, w.gpu),
                                  detector=w.detector, due=w.due) for w in g.waiting],
                excluded=[GateExclusion(node=x.node, gpu=None if x.gpu is None else name(x.node, x.gpu),
                                        verdict=x.verdict, why=x.why) for x in g.excluded])
        faults = [Fault(category=o.category,  # type: ignore[arg-type]
                        culprit=Culprit(node=o.node, gpus=[name(o.node, i) for i in sorted(o.gpus)]), reason=o.reason,
                        incident=o.id or None)
                  for o in self.others]
        return bounded_incident(Incident(
            id=self.id,
            job=self.job,
            category=self.category,  # type: ignore[arg-type]
            culprit=Culprit(node=self.node, gpus=gpu_ids),
            opened_at=self.opened_at,
            severity=self.severity,  # type: ignore[arg-type]
            state=self.state,
            version=self.version,
            updated_at=self.updated_at,
            summary=self.summary if summary is None else summary,
            evidence=list(self.evidence),
            lost_gpu_hours=self.lost_gpu_hours,
            gate=gate,
            faults=faults,
        ))
