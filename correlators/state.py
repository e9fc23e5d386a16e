"""What the correlator remembers between events: one typed root, :class:`EngineState`, as plain data.

Everything the engine knows lives here and nowhere else: the rule sets
(:mod:`correlators.rules`) and their collaborators hold references, never
state of their own. So this is exactly what a snapshot serialises and a
takeover installs (:mod:`correlators.snapshots`, through :data:`STATE`, a
pydantic ``TypeAdapter``), and reading one back can at worst be refused:

* stdlib dataclasses, mutated in place at native speed (the engine judges
  tens of thousands of events a second); pydantic only reads and writes them;
* JSON-friendly shapes: no tuple dict keys (``node -> GPU index -> ...``);
  every incident held once, in :attr:`EngineState.incidents` under a ref of
  its own, and named by that ref everywhere else (so a restore cannot split one
  incident into copies, and two incidents that happen to get the same public id
  stay two, as they were before snapshots were data); timers
  as records (:mod:`correlators.timers`); windows as deques written as lists
  with their bound (:class:`~correlators.state_fields.Bounded`); datetimes
  tz-aware; unknown fields refused.

Adding a piece of state: a field with a default on :class:`EngineState` (or
on the record it belongs to: :class:`~correlators.job_progress.JobProgress`,
:class:`~correlators.gpu_health.GpuHealth`, ...), in a JSON-friendly shape.
Nothing else: the snapshots' state version is derived from this schema, so a
snapshot of the old shape is refused and the state rebuilt from the log. A
change of *meaning* with the same shape is the one case to mark by hand
(``STATE_REVISION`` in :mod:`correlators.snapshots`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import ConfigDict, GetCoreSchemaHandler, TypeAdapter
from pydantic_core import core_schema

from correlators.attribution import BmcView
from correlators.blast_radius import BlastRadius
from correlators.clock import CellClock
from correlators.findings import Finding
from correlators.gpu_health import GpuHealth
from correlators.incident_state import OpenIncident
from correlators.job_progress import JobProgress
from correlators.lemons import LemonBook
from correlators.nvml_presence import NvmlNode
from correlators.planner import WorkOwner
from correlators.quarantine_ledger import QuarantineLedger
from correlators.state_fields import Bounded, Instant
from correlators.timers import TimerQueue
from correlators.topology import Topology
from streams.decisions import Command, Incident

__all__ = ["AwaitingRemap", "Decision", "EngineState", "Heartbeat", "LostGpu", "SeenWindow", "STATE",
           "SEEN_IDS", "HEARTBEAT_GAPS"]

Decision = Incident | Command

SEEN_IDS = 200_000  # event ids remembered, to skip a re-sent event
HEARTBEAT_GAPS = 20  # an agent's cadence is the median of this many gaps


class SeenWindow:
    """The ids of the newest :data:`SEEN_IDS` events judged, oldest first; serialised as that list."""

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict.fromkeys(ids)
        while len(self._ids) > SEEN_IDS:
            self._ids.popitem(last=False)

    def add(self, event_id: str) -> bool:
        """Remember ``event_id``; False when it was seen already (a duplicate)."""
        if event_id in self._ids:
            return False
        self._ids[event_id] = None
        if len(self._ids) > SEEN_IDS:
            self._ids.popitem(last=False)
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeenWindow) and list(self._ids) == list(other._ids)

    __hash__ = None  # type: ignore[assignment]  # mutable

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        ids = core_schema.list_schema(core_schema.str_schema(), max_length=SEEN_IDS)
        return core_schema.no_info_after_validator_function(
            cls, ids, serialization=core_schema.plain_serializer_function_ser_schema(list, return_schema=ids))


@dataclass
class Heartbeat:
    """A node agent's newest heartbeat and the gaps between the last ones (its cadence)."""

    last: Instant
    gaps: Annotated[deque[float], Bounded(HEARTBEAT_GAPS)] = field(
        default_factory=lambda: deque(maxlen=HEARTBEAT_GAPS))

    def usual(self) -> float | None:
        """The agent's cadence: the median gap, once two are known (silence means nothing before)."""
        return sorted(self.gaps)[len(self.gaps) // 2] if len(self.gaps) >= 2 else None

    def judge_step(self) -> float:
        """How long a silent node's verdict waits after its silence is noticed (the longest recent gap)."""
        return max(15.0, max(self.gaps) if self.gaps else 0.0)


@dataclass
class LostGpu:
    """A GPU that fell off the bus: when, which, the event that said so (power grouping looks back on these)."""

    ts: Instant
    index: int
    evidence: str


@dataclass
class AwaitingRemap:
    """An XID that counts only if NVML shows rows pending remap: since when, and the XID's event."""

    since: Instant
    evidence: str


@dataclass
class EngineState:
    """Everything one engine remembers (one per cell); see the module docstring for the rules of its shape."""

    __pydantic_config__ = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    clock: Instant | None = None  # event time: the newest stamp within the reach of the vote (correlators/clock.py)
    sources: CellClock = field(default_factory=CellClock)  # each source's watermark; the screen of skewed ones
    seen: SeenWindow = field(default_factory=SeenWindow)
    # --- who holds what, and what is out of service
    topology: Topology = field(default_factory=Topology)
    ledger: QuarantineLedger = field(default_factory=QuarantineLedger)
    hardware_work: dict[str, list[WorkOwner]] = field(default_factory=dict)  # node -> planner's owners
    blast: BlastRadius = field(default_factory=BlastRadius)  # fences of the window, those held past the limit
    # --- hardware: per GPU (node -> index -> ...) and per node
    health: dict[str, dict[int, GpuHealth]] = field(default_factory=dict)
    awaiting_remap: dict[str, dict[int, AwaitingRemap]] = field(default_factory=dict)
    pending_fence: dict[str, list[Finding]] = field(default_factory=dict)  # debounced, by node
    lost: dict[str, list[LostGpu]] = field(default_factory=dict)
    psu_sel: dict[str, list[Instant]] = field(default_factory=dict)  # power-supply SEL times, by node
    host_oom: dict[str, Instant] = field(default_factory=dict)  # the host OOM killer's last word, by node
    rank_crashed: dict[str, list[Instant]] = field(default_factory=dict)  # ranks' newest crashes, by node (16 kept)
    held_writes: dict[str, list[Finding]] = field(default_factory=dict)  # failed checkpoint writes held, by job
    # --- liveness: in-band heartbeats, silence, the out-of-band view
    heartbeat: dict[str, Heartbeat] = field(default_factory=dict)
    silent: dict[str, Instant] = field(default_factory=dict)  # node -> its last heartbeat before the silence
    judge_from: dict[str, Instant] = field(default_factory=dict)  # when a silent node's verdict was first due
    bmc: dict[str, BmcView] = field(default_factory=dict)
    bmc_clock: Instant | None = None  # the newest BMC report of the cell (the BMC poller's own time)
    not_ready: dict[str, Instant] = field(default_factory=dict)  # nodes the scheduler says are not ready, since
    nvml: dict[str, NvmlNode] = field(default_factory=dict)  # which GPUs NVML still reports, by node
    # --- jobs
    progress: dict[str, JobProgress] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)  # restarts issued, by job
    unknown_restarts: dict[str, list[Instant]] = field(default_factory=dict)  # of those, for an unknown cause: when
    # (those within the policy's restarts.unknown_cause_window_s, at most 16)
    restart_log: Annotated[deque[Instant], Bounded()] = field(default_factory=deque)  # cluster-wide, per_s
    # --- incidents: each held once, under its ref; everything else names it by ref
    incidents: dict[int, OpenIncident] = field(default_factory=dict)  # ref -> incident
    by_id: dict[str, int] = field(default_factory=dict)  # public id -> ref of the newest incident with it
    next_ref: int = 0
    failure: dict[str, int] = field(default_factory=dict)  # job -> its current failure incident
    job_conditions: dict[str, dict[str, int]] = field(default_factory=dict)  # job -> category -> incident
    node_conditions: dict[str, dict[str, int]] = field(default_factory=dict)  # job-less hardware: node -> ...
    job_history: dict[str, list[int]] = field(default_factory=dict)  # job -> its published incidents, in order
    gate_watch: dict[str, list[int]] = field(default_factory=dict)  # node -> incidents whose open gate watches it
    timers: TimerQueue = field(default_factory=TimerQueue)
    # --- lemons: per GPU and node, the failures blamed on software that implicated it (rules/lemons.py)
    lemons: LemonBook = field(default_factory=LemonBook)

    # --- get or create ----------------------------------------------------------------
    def gpu_health(self, node: str, index: int) -> GpuHealth:
        on_node = self.health.get(node)
        if on_node is None:
            on_node = self.health[node] = {}
        h = on_node.get(index)
        if h is None:
            h = on_node[index] = GpuHealth()
        return h

    def job_progress(self, job: str) -> JobProgress:
        p = self.progress.get(job)
        if p is None:
            p = self.progress[job] = JobProgress()
        return p

    def nvml_node(self, node: str) -> NvmlNode:
        v = self.nvml.get(node)
        if v is None:
            v = self.nvml[node] = NvmlNode()
        return v

    def bmc_view(self, node: str) -> BmcView:
        v = self.bmc.get(node)
        if v is None:
            v = self.bmc[node] = BmcView()
        return v

    # --- incidents -------------------------------------------------------------------
    def hold(self, inc: OpenIncident) -> OpenIncident:
        """Hold a new incident: give it the next ref; its id now names it (the newest with that id)."""
        self.next_ref += 1
        inc.ref = self.next_ref
        self.incidents[inc.ref] = inc
        self.by_id[inc.id] = inc.ref
        return inc

    def drop(self, inc: OpenIncident) -> None:
        """Forget an incident folded into another (a reopen): its id no longer names anything."""
        self.by_id.pop(inc.id, None)
        del self.incidents[inc.ref]

    def incident(self, incident_id: str) -> OpenIncident | None:
        """The newest incident with this public id (timers, fences and people name incidents by id)."""
        ref = self.by_id.get(incident_id)
        return self.incidents[ref] if ref is not None else None

    def failure_of(self, job: str) -> OpenIncident | None:
        """The job's current failure incident (open, held, or finished and kept for a reopen)."""
        ref = self.failure.get(job)
        return self.incidents[ref] if ref is not None else None

    def condition(self, job: str | None, node: str | None, category: str) -> OpenIncident | None:
        """The condition incident of ``category`` of ``job`` (or, without a job, of ``node``'s hardware)."""
        by = self.job_conditions.get(job) if job is not None else self.node_conditions.get(node or "")
        ref = by.get(category) if by else None
        return self.incidents[ref] if ref is not None else None

    def set_condition(self, job: str | None, node: str | None, category: str, inc: OpenIncident) -> None:
        if job is not None:
            self.job_conditions.setdefault(job, {})[category] = inc.ref
        else:
            self.node_conditions.setdefault(node or "", {})[category] = inc.ref

    def history(self, job: str) -> list[OpenIncident]:
        """The job's published incidents (failures and conditions), oldest first."""
        return [self.incidents[ref] for ref in self.job_history.get(job, ())]

    def dangling(self) -> list[str]:
        """What in this state is not one the engine could have made: references to incidents it does not
        hold, refs that disagree. Empty for every state the engine made; a snapshot is refused otherwise."""
        bad = [f"incident {ref} holds ref {inc.ref}" for ref, inc in self.incidents.items() if inc.ref != ref]
        bad += [f"incident ref {ref} is past next_ref {self.next_ref}"
                for ref in self.incidents if ref > self.next_ref]
        refs = [("id", i, r) for i, r in self.by_id.items()]
        refs += [("failure", j, r) for j, r in self.failure.items()]
        refs += [("condition", j, r) for by in (self.job_conditions, self.node_conditions)
                 for j, cats in by.items() for r in cats.values()]
        refs += [("history", j, r) for j, rs in self.job_history.items() for r in rs]
        refs += [("gate watch", n, r) for n, rs in self.gate_watch.items() for r in rs]
        bad += [f"{what} {subject!r} names incident ref {ref}, which is not held"
                for what, subject, ref in refs if ref not in self.incidents]
        return bad


#: Reads and writes engine states (JSON); snapshots use ``dict[str, EngineState]`` (cell -> state).
STATE: TypeAdapter[EngineState] = TypeAdapter(EngineState)
