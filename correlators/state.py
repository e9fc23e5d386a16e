"""What the correlator remembers between events; the rule mixins share it."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from datetime import datetime

from correlators.attribution import BmcView
from correlators.findings import Finding
from correlators.gpu_health import GpuHealth
from correlators.incident_state import OpenIncident
from correlators.job_progress import JobProgress
from correlators.planner import Planner
from correlators.policy import Policy
from correlators.quarantine_ledger import QuarantineLedger
from correlators.timers import TimerQueue
from correlators.topology import Topology
from streams.decisions import Command, Incident

__all__ = ["CorrelatorState", "Decision"]

Decision = Incident | Command


class CorrelatorState:
    """The correlator's memory: topology, fences, per-GPU and per-job state, incidents, timers."""

    def __init__(self, policy: Policy) -> None:
        self.p = policy
        self.topo = Topology()
        self.ledger = QuarantineLedger()
        self.plan = Planner(policy, self.topo, self.ledger)
        self.timers = TimerQueue()
        self.clock: datetime | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._out: list[Decision] = []
        self.health: dict[tuple[str, int], GpuHealth] = defaultdict(GpuHealth)
        self.progress: dict[str, JobProgress] = defaultdict(JobProgress)
        self.failure: dict[str, OpenIncident] = {}
        self.conditions: dict[tuple[str | None, str | None, str], OpenIncident] = {}
        self.incidents: dict[str, OpenIncident] = {}
        self.job_history: dict[str, list[OpenIncident]] = defaultdict(list)
        self.restarts: dict[str, int] = defaultdict(int)
        self.unknown_restarts: dict[str, int] = defaultdict(int)
        self.restart_log: deque[datetime] = deque()
        self.pending_fence: dict[str, list[Finding]] = defaultdict(list)
        self.lost: dict[str, list[tuple[datetime, int, str]]] = defaultdict(list)
        self.bmc: dict[str, BmcView] = defaultdict(BmcView)
        self.psu_sel: dict[str, list[datetime]] = defaultdict(list)
        self.heartbeat: dict[str, tuple[datetime, deque[float]]] = {}
        self.silent: dict[str, datetime] = {}
        self.judge_from: dict[str, datetime] = {}  # when a silent node's verdict was first due
        self.host_oom: dict[str, datetime] = {}
        self.awaiting_remap: dict[tuple[str, int], tuple[datetime, str]] = {}
