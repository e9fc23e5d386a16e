"""Blame: which rank never arrived, what a worker's exit means, why a node went silent."""

from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from correlators.state_fields import Bounded, Instant
from correlators.topology import Job

__all__ = ["CollectiveReports", "exit_category", "silence_category", "BmcView"]


@dataclass
class CollectiveReports:
    """NCCL watchdog reports of one job's failure, by reporting rank."""

    reporting: set[int] = field(default_factory=set)
    last_enqueued: dict[int, int] = field(default_factory=dict)

    def add(self, rank: int | None, last_enqueued: int | None = None) -> None:
        if rank is None:
            return
        self.reporting.add(rank)
        if last_enqueued is not None:
            self.last_enqueued[rank] = last_enqueued

    def culprit_ranks(self, job: Job) -> list[int]:
        """The ranks that never arrived: missing from the reports, else behind on enqueued work.

        The rank that reports a timeout is rarely the culprit; the one that is
        silent (or whose last enqueued collective is behind the others') is.
        """
        world = set(job.place_of)
        missing = sorted(world - self.reporting)
        if world and missing and len(missing) <= max(1, len(world) // 2):
            return missing
        if self.last_enqueued:
            newest = max(self.last_enqueued.values())
            behind = sorted(r for r, v in self.last_enqueued.items() if v < newest)
            if behind and len(behind) <= max(1, len(self.last_enqueued) // 2):
                return behind
        return []

    def culprit(self, job: Job) -> tuple[str | None, list[int]]:
        """(node, gpu indices) of the culprit ranks; the node most of them sit on."""
        places = [job.place_of[r] for r in self.culprit_ranks(job) if r in job.place_of]
        if not places:
            return None, []
        node = Counter(n for n, _ in places).most_common(1)[0][0]
        return node, sorted(g for n, g in places if n == node)


def exit_category(kind: str) -> str | None:
    """The category a worker's classified error points to (None: a consequence, not a cause)."""
    return {
        "cuda_oom": "cuda_oom",
        "cuda_error": "software_crash",
        "app_error": "software_crash",
        "nccl_error": "network_timeout",
        "nccl_timeout": "network_timeout",
    }.get(kind)


BMC_GAPS = 16  # a BMC's poll interval is the median of this many gaps between its reports


@dataclass
class BmcView:
    """The out-of-band view of one node, as far as we have heard."""

    power_on: bool | None = None
    reachable: bool = True
    hardware_sel: list[tuple[str, str]] = field(default_factory=list)  # (component, line)
    heard: Instant | None = None  # event time of its newest report (power, SEL or a failed poll)
    gaps: Annotated[deque[float], Bounded(BMC_GAPS)] = field(default_factory=lambda: deque(maxlen=BMC_GAPS))
    hardware_at: Instant | None = None  # the newest hardware SEL (or machine check) it, or the kernel, logged
    node_fault_at: Instant | None = None  # ...of the node's own parts (CPU, memory, board): not a power supply
    node_fault: str = ""  # what that newest one was, for the incident's text

    def report(self, ts: datetime) -> None:
        """One report (power, SEL line, failed poll) at ``ts``: the newest heard, and the poll cadence."""
        if self.heard is not None and ts > self.heard:
            self.gaps.append((ts - self.heard).total_seconds())
        self.heard = ts if self.heard is None else max(self.heard, ts)

    def interval(self) -> float | None:
        """Seconds between its polls, learned from its reports (None until two gaps are known)."""
        return statistics.median(self.gaps) if len(self.gaps) >= 2 else None

    def hardware_fault(self, component: str, line: str, ts: datetime) -> None:
        self.hardware_sel.append((component, line))
        self.hardware_at = ts if self.hardware_at is None else max(self.hardware_at, ts)
        if component != "power_supply" and (self.node_fault_at is None or ts >= self.node_fault_at):
            self.node_fault_at, self.node_fault = ts, component


def silence_category(bmc: BmcView, rack_peers_lost: int) -> str:
    """Why a node is silent in-band, read together with its BMC and its rack."""
    out_of_band_lost = not bmc.reachable or bmc.power_on is False
    if rack_peers_lost >= 1 and out_of_band_lost:
        return "rack_outage"
    components = {c for c, _ in bmc.hardware_sel}
    if "power_supply" in components:
        return "power_supply_fault"
    if components:
        return "node_hardware_fault"
    return "node_down"
