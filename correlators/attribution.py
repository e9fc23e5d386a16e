"""Blame: which rank never arrived, what a worker's exit means, why a node went silent."""

from __future__ import annotations

import heapq
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
    """NCCL watchdog reports of one job's failure, by reporting rank.

    In a collective timeout every rank reports, within seconds: 16,384 of them for one job the size
    of Llama 3's. Who is missing is asked after every report, so it is answered from a tally kept up
    to date as reports come (:class:`_Tally`: the missing ranks by node, the ranks behind on enqueued
    work), not by walking the job's ranks each time. The tally is derived, never serialised: a
    restored engine, or a report against another allocation of the job, rebuilds it once.
    """

    reporting: set[int] = field(default_factory=set)
    last_enqueued: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tally: _Tally | None = None

    def add(self, rank: int | None, last_enqueued: int | None = None) -> None:
        if rank is None:
            return
        self.reporting.add(rank)
        before = self.last_enqueued.get(rank)
        if last_enqueued is not None:
            self.last_enqueued[rank] = last_enqueued
        if self._tally is not None:
            self._tally.reported(rank, before, last_enqueued, self.reporting, self.last_enqueued)

    def _tally_for(self, job: Job) -> _Tally:
        t = self._tally
        if t is None or not t.counts(job.place_of, self.reporting, self.last_enqueued):
            t = self._tally = _Tally(job.place_of, self.reporting, self.last_enqueued)
        return t

    def culprit_ranks(self, job: Job) -> list[int]:
        """The ranks that never arrived: missing from the reports, else behind on enqueued work.

        The rank that reports a timeout is rarely the culprit; the one that is
        silent (or whose last enqueued collective is behind the others') is.
        """
        t = self._tally_for(job)
        if t.missing_rules():
            return sorted(t.missing)
        if t.behind_rules(self.last_enqueued):
            return sorted(t.behind)
        return []

    def culprit_text(self, job: Job) -> str:
        """``str(self.culprit_ranks(job))``: how an incident's summary names the ranks. While the missing
        ranks are the culprits the tally keeps this text as reports come (a report takes its rank out
        of it), so a storm's thousands of reports do not each write out thousands of ranks again."""
        t = self._tally_for(job)
        if t.missing_rules():
            return t.missing_text()
        return str(self.culprit_ranks(job))

    def culprit(self, job: Job) -> tuple[str | None, list[int]]:
        """(node, gpu indices) of the culprit ranks; the node most of them sit on (of equals, the one
        holding the lowest of those ranks)."""
        t = self._tally_for(job)
        if t.missing_rules():
            return t.missing_culprit()
        places = [job.place_of[r] for r in self.culprit_ranks(job) if r in job.place_of]
        if not places:
            return None, []
        node = Counter(n for n, _ in places).most_common(1)[0][0]
        return node, sorted(g for n, g in places if n == node)


class _Tally:
    """Who has not reported, by node, and who is behind, for one allocation of a job (derived state).

    Reports only ever remove ranks from the missing: a node's count of missing ranks only falls, so
    the node most of them sit on is kept in buckets by count, each a heap by the node's lowest
    missing rank (entries gone stale are dropped when met).
    """

    def __init__(self, place_of: dict[int, tuple[str, int]], reporting: set[int],
                 last_enqueued: dict[int, int]) -> None:
        self.place_of = place_of
        self.world = len(place_of)
        self.missing = set(place_of).difference(reporting)
        self.seen = (len(reporting), len(last_enqueued))
        self.by_node: dict[str, list[int]] = {}
        for rank in sorted(self.missing):
            self.by_node.setdefault(place_of[rank][0], []).append(rank)
        self.buckets: dict[int, list[tuple[int, str]]] = {}
        for node, ranks in self.by_node.items():
            heapq.heappush(self.buckets.setdefault(len(ranks), []), (ranks[0], node))
        self.top = max(self.buckets, default=0)
        self.newest = max(last_enqueued.values(), default=None)
        self.behind = {r for r, v in last_enqueued.items() if self.newest is not None and v < self.newest}
        self._missing_text: str | None = None  # str(sorted(missing)), once asked for; then kept up to date

    def counts(self, place_of: dict[int, tuple[str, int]], reporting: set[int],
               last_enqueued: dict[int, int]) -> bool:
        """Still a tally of these reports against this allocation (nothing changed behind its back)."""
        return place_of is self.place_of and self.seen == (len(reporting), len(last_enqueued))

    def reported(self, rank: int, before: int | None, enqueued: int | None, reporting: set[int],
                 last_enqueued: dict[int, int]) -> None:
        """``rank`` reported (``enqueued``: its last enqueued work, if it said; ``before``: what it said last)."""
        self.seen = (len(reporting), len(last_enqueued))
        if rank in self.missing:
            self.missing.discard(rank)
            if self._missing_text is not None:
                self._missing_text = _without(self._missing_text, rank)
            node = self.place_of[rank][0]
            ranks = self.by_node[node]
            ranks.remove(rank)
            if ranks:
                heapq.heappush(self.buckets.setdefault(len(ranks), []), (ranks[0], node))
        if enqueued is not None and enqueued != before:
            if self.newest is None or enqueued > self.newest or before == self.newest:
                # a new newest, or the rank that said the newest now says less (rare): count again
                self.newest = max(last_enqueued.values())
                self.behind = {r for r, v in last_enqueued.items() if v < self.newest}
            elif enqueued < self.newest:
                self.behind.add(rank)
            else:
                self.behind.discard(rank)

    def missing_rules(self) -> bool:
        """Whether the missing ranks are the culprits (some missing, at most half the job)."""
        return bool(self.world and self.missing and len(self.missing) <= max(1, self.world // 2))

    def behind_rules(self, last_enqueued: dict[int, int]) -> bool:
        return bool(self.behind and len(self.behind) <= max(1, len(last_enqueued) // 2))

    def missing_text(self) -> str:
        if self._missing_text is None:
            self._missing_text = str(sorted(self.missing))
        return self._missing_text

    def missing_culprit(self) -> tuple[str | None, list[int]]:
        while self.top > 0:
            heap = self.buckets.get(self.top)
            while heap:
                low, node = heap[0]
                ranks = self.by_node.get(node)
                if ranks and len(ranks) == self.top and ranks[0] == low:
                    return node, sorted(self.place_of[r][1] for r in ranks)
                heapq.heappop(heap)  # stale: the node has fewer missing ranks now
            self.top -= 1
        return None, []


def _without(text: str, rank: int) -> str:
    """``text`` (a sorted list of distinct ranks as ``str`` writes it, ``rank`` among them) without ``rank``."""
    tok = str(rank)
    if text == f"[{tok}]":
        return "[]"
    if text.startswith(f"[{tok}, "):
        return "[" + text[len(tok) + 3:]
    if text.endswith(f", {tok}]"):
        return text[:-(len(tok) + 3)] + "]"
    return text.replace(f", {tok}, ", ", ", 1)


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
NODE_FAULTS = 16  # the faults of a node's own parts its view keeps (a node that keeps logging them: the newest)


@dataclass
class BmcView:
    """The out-of-band view of one node, as far as we have heard."""

    power_on: bool | None = None
    reachable: bool = True
    hardware_sel: list[tuple[str, str]] = field(default_factory=list)  # (component, line)
    heard: Instant | None = None  # event time of its newest report (power, SEL or a failed poll)
    gaps: Annotated[deque[float], Bounded(BMC_GAPS)] = field(default_factory=lambda: deque(maxlen=BMC_GAPS))
    hardware_at: Instant | None = None  # the newest hardware SEL (or machine check) it, or the kernel, logged
    # every fault of its own parts, (when, what), as they came: a second SEL does not hide the first
    node_faults: Annotated[deque[tuple[Instant, str]], Bounded(NODE_FAULTS)] = field(
        default_factory=lambda: deque(maxlen=NODE_FAULTS))

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
        if component == "power_supply":
            return
        self.node_faults.append((ts, component))

    def _newest_node_fault(self) -> tuple[datetime, str] | None:
        newest = None
        for fault in self.node_faults:  # the latest logged wins a tie
            if newest is None or fault[0] >= newest[0]:
                newest = fault
        return newest

    @property
    def node_fault_at(self) -> datetime | None:
        """When the newest fault of the node's own parts (CPU, memory, board: not a power supply) was logged."""
        newest = self._newest_node_fault()
        return newest[0] if newest else None

    @property
    def node_fault(self) -> str:
        """What that newest fault was, for the incident's text."""
        newest = self._newest_node_fault()
        return newest[1] if newest else ""

    def node_fault_near(self, at: datetime, lookback_s: float) -> tuple[datetime, str] | None:
        """The fault of the node's own parts nearest ``at``, within ``lookback_s`` of it either way (the
        consequence is often logged first), or None: a newer fault does not hide the one near ``at``."""
        near = [(abs((ts - at).total_seconds()), ts, what) for ts, what in self.node_faults
                if abs((ts - at).total_seconds()) <= lookback_s]
        return min(near)[1:] if near else None

    def first_node_fault(self, since: datetime) -> tuple[datetime, str] | None:
        """The earliest fault of the node's own parts at or after ``since`` (the one that began what followed)."""
        return min(((ts, what) for ts, what in self.node_faults if ts >= since), default=None)


def silence_category(bmc: BmcView, rack_peers_lost: int) -> str:
    """Why a node is silent in-band, read together with its BMC and its rack: its newest hardware fault says
    which (a power supply's, or its own parts'): a node that lost one power supply and ran on, then logged a
    memory UE and fell silent, died of the memory."""
    out_of_band_lost = not bmc.reachable or bmc.power_on is False
    if rack_peers_lost >= 1 and out_of_band_lost:
        return "rack_outage"
    components = {c for c, _ in bmc.hardware_sel}
    own_newest = bmc.node_fault_at is not None and bmc.node_fault_at == bmc.hardware_at
    if "power_supply" in components and not own_newest:
        return "power_supply_fault"
    if components:
        return "node_hardware_fault"
    return "node_down"
