"""A finding: one detector's conclusion about one piece of hardware or one job."""

from __future__ import annotations

from dataclasses import dataclass, field

from correlators.state_fields import Instant

__all__ = ["Finding", "PRIORITY", "FAILURE_CATEGORIES", "HARDWARE_CATEGORIES", "NODE_CATEGORIES", "covered_by", "covers"]

# Categories that stop a job; one failure incident per job at a time, refined to
# the most specific cause seen (higher wins).
PRIORITY: dict[str, int] = {
    "rack_outage": 100,
    "power_supply_fault": 90,
    "node_hardware_fault": 85,
    "node_down": 80,
    "gpu_off_bus": 70,
    "gpu_memory_fault": 68,
    "gpu_firmware_fault": 66,
    "gpu_nvlink_fault": 64,
    "cuda_oom": 50,
    "software_crash": 45,
    "network_timeout": 40,
    "training_hang": 30,
}
FAILURE_CATEGORIES = frozenset(PRIORITY)
HARDWARE_CATEGORIES = frozenset(c for c, p in PRIORITY.items() if p >= 60)
NODE_CATEGORIES = frozenset({"rack_outage", "power_supply_fault", "node_hardware_fault", "node_down"})


@dataclass
class Finding:
    category: str
    ts: Instant
    node: str | None
    gpus: list[int] = field(default_factory=list)
    reason: str = ""
    evidence: str | None = None  # event id
    belongs_to: str | None = None  # the incident this failure continues (a restart that did not load), if known


def covers(f: Finding, node: str, gpus: set[int]) -> bool:
    """Does ``f`` (a stronger cause) blame this hardware itself (so it needs no culprit of its own)?"""
    return f.node == node and (f.category in NODE_CATEGORIES or gpus <= set(f.gpus))


def covered_by(node: str, gpus: set[int], f: Finding) -> bool:
    """Is ``f`` (a weaker cause) about hardware already blamed: the node (wholly), or those GPUs?"""
    return node == f.node and (not gpus or not f.gpus or set(f.gpus) <= gpus)
