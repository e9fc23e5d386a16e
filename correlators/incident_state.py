"""An incident as the correlator keeps it while it is open."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from correlators.attribution import CollectiveReports
from correlators.state_fields import Instant
from streams.decisions import Culprit, Incident

__all__ = ["OpenIncident", "stable_id"]


def stable_id(prefix: str, *parts: object) -> str:
    """A deterministic id: the same decision on the same input gives the same id."""
    h = hashlib.sha256("|".join("" if p is None else str(p) for p in parts).encode()).hexdigest()
    return f"{prefix}-{h[:16]}"


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
    lost_gpu_hours: float | None = None
    settle_deadline: Instant | None = None
    held: bool = False  # a failure whose cause is still being judged: not published, no commands yet
    more: dict[str, set[int]] = field(default_factory=dict)  # further hardware of the same cause: node -> GPUs
    earlier_nodes: set[str] = field(default_factory=set)  # culprit nodes of earlier rounds (before a reopen)
    ref: int = 0  # its key in the engine's state (EngineState.hold); ids are public, refs are internal

    def hardware(self) -> list[tuple[str, set[int]]]:
        """Every (node, GPU indices) this incident blames: the culprit first, then the rest."""
        out = [(self.node, self.gpus)] if self.node else []
        return out + [(n, g) for n, g in sorted(self.more.items()) if n != self.node]

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

    def to_model(self, gpu_ids: list[str]) -> Incident:
        return Incident(
            id=self.id,
            job=self.job,
            category=self.category,  # type: ignore[arg-type]
            culprit=Culprit(node=self.node, gpus=gpu_ids),
            opened_at=self.opened_at,
            severity=self.severity,  # type: ignore[arg-type]
            state=self.state,
            version=self.version,
            updated_at=self.updated_at,
            summary=self.summary,
            evidence=list(self.evidence),
            lost_gpu_hours=self.lost_gpu_hours,
        )
