"""The invariants every generated fleet is held to, judged by a watcher that reads the capture, not the engine.

:func:`evaluate` runs one capture through the engine event by event (the offline path) beside a
:class:`Watch` -- what had arrived and what had been decided before each decision -- and returns, per
invariant (:data:`INVARIANTS`), the violations found. Each rule, as the operator states it:

* ``gate``: no ``restart_job`` lands on hardware that is fenced, blamed, or without a verdict (the restart
  gate's rule): every fenced or blamed GPU and node of the job's allocation is excluded, and so is one that
  no detector able to speak for it has heard from since the failure (the oracle of
  ``test_invariants.py`` (g));
* ``fenced_first``: every GPU with a fatal XID and every node with a hardware SEL is fenced before the next
  restart of any job that was using it;
* ``checkpoint``: a restart's checkpoint is the newest one saved or loaded in the current lineage that is not
  known bad (write failed, load failed, node-local on a node fenced or left out); never null when one is known;
* ``world``: a restart's GPU count is one the job's launcher can form: whole nodes of ``nproc_per_node``
  workers, within its elastic range (a fixed job: its world size);
* ``explained``: no incident for evidence an open or resolved fence already explains (the cause the fence was
  placed for -- its command's reason, a second culprit's own category -- on
  hardware already fenced -- job-less, the fencing incident's job, or a job started there after the fence --
  or the job's own earlier incident's hardware: ``test_invariants.py`` (j));
* ``consequence``: a consequence is not a second cause: no ``checkpoint_failure`` incident for a write that
  failed (not for lack of space, quota or permission) within two minutes of its job's hardware incident;
* ``tickets``: at most one repair ticket per physical unit (a GPU; a node; a power domain);
* ``hang``: no hang verdict before the job has shown :data:`CADENCE_INTERVALS` step intervals, unless
  corroborated (a trainer heartbeat, or its GPUs spinning busy at low power after its last step);
* ``ended``: no restart of a job whose run ended without failing (cancelled, finished) before it starts again --
  a scheduler's later ``job_failed`` for the same run does not undo the cancel;
* ``save``: a ``checkpoint_now`` asks a job whose run is live (started, not ended) and whose allocation holds
  the node it names, once per incident;
* ``cordon``: a node is cordoned only on evidence of the node itself, heard before the cordon: a BMC SEL of it
  or its BMC unreachable or reporting power off, an uncorrected machine check, its agent silent (a gap in its
  heartbeats well past their cadence), a collective timeout of a job on it (a zombie node), or two of its GPUs
  lost (fatal XIDs, or gone from NVML while a sibling reports: a power domain). A GPU fault is never its
  node's cordon;
* ``quarantine``: a GPU is quarantined only on evidence of that GPU, heard before it: an XID of it, NVML
  readings of it out of the ordinary (ECC errors, rows pending remap or failed, heat or a thermal slowdown), it
  gone from NVML while a sibling reports, or its node's power-supply SEL;
* ``mode``: a restart comes back ``in_process`` only when nothing of the job's allocation is left out;
* ``size``: every record under ``streams.bounds.MAX_RECORD_BYTES``;
* ``same``: the same capture gives the same decisions byte for byte, run again from its bytes and across a
  worker takeover (a snapshot sealed mid-capture with :mod:`correlators.snapshots`, restored, continued).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from test_invariants import FATAL_XIDS, POLICY, _Oracle, _restart_violations, _same_hardware_violations

from correlators.engine import Correlator
from correlators.partitions import PartitionState
from correlators.snapshots import capture_engines, open_snapshot, policy_fingerprint, restore, seal
from faultline.outcome import collate, decide_offline
from producers.capture.screen import Accepted, CaptureScreen
from streams import events as ev
from streams.bounds import MAX_RECORD_BYTES
from streams.decisions import Command, Incident

__all__ = ["CADENCE_INTERVALS", "INVARIANTS", "evaluate", "events_of"]

INVARIANTS = ("gate", "fenced_first", "checkpoint", "world", "explained", "consequence", "tickets", "hang", "ended",
              "save", "mode", "cordon", "quarantine", "size", "same")
CADENCE_INTERVALS = 3
POWER_WINDOW_S = 60.0  # GPUs of one power domain lost this close together are the domain's fault
BLAMING = {"gpu_off_bus", "gpu_memory_fault", "gpu_nvlink_fault", "gpu_firmware_fault", "power_supply_fault",
           "node_down", "node_hardware_fault", "rack_outage", "network_timeout"}
HARDWARE = BLAMING - {"network_timeout"}
NODE_UNIT = {"node_down", "node_hardware_fault", "rack_outage"}
FINGERPRINT = policy_fingerprint(POLICY)
STORAGE_WORDS = ("No space", "quota", "Read-only", "Permission denied")  # a write failing on its own storage


@dataclass
class Watch(_Oracle):
    """The gate oracle's facts, and what the other invariants need: SELs, steps, spins, domains, launchers."""

    sels: list[tuple[str, datetime]] = field(default_factory=list)  # (node, when) of hardware SELs
    users: dict[str, set[str]] = field(default_factory=dict)  # node -> jobs whose allocation held it
    launcher: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # job -> (min, max, nproc) in GPUs
    steps: dict[str, list[list[datetime]]] = field(default_factory=dict)  # job -> per run, its step times
    early_steps: dict[str, list[datetime]] = field(default_factory=dict)  # job -> steps heard before any job_started
    spun: dict[str, datetime] = field(default_factory=dict)  # job -> last corroboration (spin, heartbeat)
    domain: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, GPU id) -> power domain
    uuid: dict[tuple[str, int], str] = field(default_factory=dict)
    loaded: dict[str, list[tuple[int, str | None, str | None, datetime]]] = field(default_factory=dict)
    writer: dict[tuple[str, int], str | None] = field(default_factory=dict)  # (job, step) -> node that saved
    # unit -> the incident that fenced it, when, and the fence's own cause (its command's reason: for a second
    # culprit, its own category, not the incident's)
    fence_of: dict[tuple[str, str | None], tuple[Incident, datetime, str]] = field(default_factory=dict)
    ckpt_errors: dict[str, list[tuple[datetime, str]]] = field(default_factory=dict)  # job -> failed writes
    ended: dict[str, str] = field(default_factory=dict)  # job -> how its run ended without failing, till it starts
    live: dict[str, bool] = field(default_factory=dict)  # job -> its latest run started and not ended (failed or not)
    # the plan's skewed source and its offset: a save of that source is also known by when it happened
    # (_Oracle.true_saved), and a restart from one that happened before the failure is safe whatever its stamp
    skew: tuple[str, float] | None = None
    node_evidence: set[str] = field(default_factory=set)  # nodes something said was itself failing (``cordon``)
    lost: dict[str, list[tuple[int, datetime]]] = field(default_factory=dict)  # node -> (GPU, when) of fatal XIDs
    gpu_evidence: set[tuple[str, int]] = field(default_factory=set)  # GPUs something said was failing
    psu: set[str] = field(default_factory=set)  # nodes whose BMC logged a power-supply SEL

    def see(self, e: ev.Event) -> None:
        super().see(e)
        b, node, job = e.body, e.node, e.job
        self._node_evidence(e)
        if isinstance(b, ev.CheckpointSaved) and job and self.skew and e.source == self.skew[0]:
            self.true_saved[(job, b.step, b.path)] = e.ts - timedelta(seconds=self.skew[1])
        elif isinstance(b, ev.TrainStep) and job and self.skew and e.source == self.skew[0]:
            self.true_stepped.setdefault(job, []).append((e.ts, e.ts - timedelta(seconds=self.skew[1])))
        if isinstance(b, ev.Inventory) and node:
            for g in b.gpus:
                self.uuid[(node, g.index)] = g.uuid or ""
                self.domain[(node, g.uuid or "")] = g.power_domain or node
        elif isinstance(b, ev.JobStarted) and job:
            world = sum(len(a.gpus) for a in b.allocation)
            nproc = min((len(a.gpus) for a in b.allocation), default=world) or 1
            lo, hi = (b.elastic.min_gpus, b.elastic.max_gpus) if b.elastic else (world, world)
            self.launcher[job] = (lo, hi, nproc)
            # a step of this run may arrive before the line that starts it (that line late): it counts by its time
            self.steps.setdefault(job, []).append([t for t in self.early_steps.pop(job, []) if t >= e.ts])
            for a in b.allocation:
                self.users.setdefault(a.node, set()).add(job)
            self.ended.pop(job, None)
            self.live[job] = True
        elif isinstance(b, ev.JobEnded) and job:
            self.live[job] = False
            if b.status != "failed":
                self.ended.setdefault(job, b.status)
        elif isinstance(b, ev.BmcSel) and node and b.hardware_fault and b.asserted and b.component != "power_supply":
            self.sels.append((node, e.ts))
        elif isinstance(b, ev.TrainStep) and job and self.steps.get(job):
            self.steps[job][-1].append(e.ts)
        elif isinstance(b, ev.TrainStep) and job:
            self.early_steps.setdefault(job, []).append(e.ts)
        elif isinstance(b, ev.TrainerHeartbeat) and job:
            self.spun[job] = e.ts
        elif isinstance(b, ev.CheckpointLoaded) and job and b.step is not None:
            self.loaded.setdefault(job, []).append((b.step, b.path, node, e.ts))
        elif isinstance(b, ev.CheckpointSaved) and job:
            self.writer[(job, b.step)] = node
        elif isinstance(b, ev.CheckpointFailed) and job:
            self.ckpt_errors.setdefault(job, []).append((e.ts, b.error))
        elif isinstance(b, ev.GpuSample) and node and (b.metrics.utilization_pct or 0) >= 90 \
                and (b.metrics.power_w or 1e9) <= 200:
            for j, alloc in self.alloc.items():
                if (i := self.index(node, b.gpu)) is not None and i in alloc.get(node, []):
                    self.spun[j] = e.ts

    def decided(self, d: Incident | Command) -> None:
        super().decided(d)
        if isinstance(d, Command) and d.type in ("quarantine_gpu", "cordon_node") and d.target.node:
            inc = self.incidents.get(d.incident)
            if inc is not None:
                unit = (d.target.node, d.target.gpu if d.type == "quarantine_gpu" else None)
                self.fence_of.setdefault(unit, (inc, d.issued_at, str(d.params.get("reason") or inc.category)))
        elif isinstance(d, Command) and d.type == "release_gpu" and d.target.node and d.target.gpu:
            self.fenced_gpus.discard((d.target.node, d.target.gpu))

    def _node_evidence(self, e: ev.Event) -> None:
        b, node = e.body, e.node
        if node is None and not isinstance(b, ev.NcclTimeout):
            return
        if isinstance(b, ev.Xid) and node and (i := self.index(node, b.gpu)) is not None:
            self.gpu_evidence.add((node, i))
        elif isinstance(b, ev.GpuSample) and node and (i := self.index(node, b.gpu)) is not None \
                and _unusual(b.metrics):
            self.gpu_evidence.add((node, i))
        if isinstance(b, ev.BmcSel) and b.asserted and b.component == "power_supply":
            self.psu.add(node or "")
        if isinstance(b, ev.BmcSel) and b.asserted or isinstance(b, ev.BmcUnreachable) \
                or isinstance(b, ev.BmcPower) and not b.on \
                or isinstance(b, ev.KernelFault) and b.fault == "machine_check":
            self.node_evidence.add(node or "")
        elif isinstance(b, ev.NcclTimeout) and e.job in self.alloc:
            self.node_evidence |= set(self.alloc[e.job or ""])
        elif isinstance(b, ev.Xid) and node and b.code in FATAL_XIDS and (i := self.index(node, b.gpu)) is not None:
            self.lost.setdefault(node, []).append((i, e.ts))
        elif isinstance(b, ev.AgentHeartbeat) and node and self._silent(node, e.ts, before=True):
            self.node_evidence.add(node)

    def _silent(self, node: str, now: datetime, before: bool = False) -> bool:
        """Has ``node``'s agent been quiet at ``now`` well past its cadence (``before``: the beat at ``now`` is the
        one that ends the gap)?"""
        beats = sorted(self.heartbeats.get(node, []))
        if before and beats and beats[-1] == now:
            beats = beats[:-1]
        gaps = [b - a for a, b in zip(beats, beats[1:], strict=False) if b > a]
        if not beats or not gaps:
            return False
        return (now - beats[-1]).total_seconds() > 1.5 * min(gaps).total_seconds()

    def gone_gpus(self, node: str, now: datetime) -> set[int]:
        """The node's GPUs gone from NVML at ``now``: unsampled for twice its pace while a sibling was sampled."""
        per = {i: sorted(ts) for i, ts in self.samples.get(node, {}).items() if ts}
        gaps = [b - a for ts in per.values() for a, b in zip(ts, ts[1:], strict=False) if b > a]
        if not gaps:
            return set()
        newest = max(ts[-1] for ts in per.values())
        return {i for i, ts in per.items() if newest - ts[-1] > 2 * min(gaps)}

    def cordon_cause(self, node: str, now: datetime) -> bool:
        """Is there evidence of ``node`` itself by ``now`` (the ``cordon`` invariant)?"""
        if node in self.node_evidence or self._silent(node, now):
            return True
        gone = self.gone_gpus(node, now)
        together = [{g for g, t in self.lost.get(node, []) if abs((t - at).total_seconds()) <= POWER_WINDOW_S} | gone
                    for _, at in self.lost.get(node, [])] + [gone]
        return any(self._one_domain(node, gpus) for gpus in together)

    def quarantine_cause(self, node: str, gid: str, now: datetime) -> bool:
        """Is there evidence of GPU ``gid`` of ``node`` by ``now`` (the ``quarantine`` invariant)?"""
        idx = next((i for (n, i), u in self.uuid.items() if n == node and u == gid), None)
        if idx is None:
            return False  # a GPU no inventory named: nothing was heard of it
        return (node, idx) in self.gpu_evidence or node in self.psu or idx in self.gone_gpus(node, now)

    def _one_domain(self, node: str, gpus: set[int]) -> bool:
        """Two or more of ``gpus`` share a power domain (lost together: the domain's fault, its node's cordon)."""
        domains = [self.domain.get((node, self.uuid.get((node, g), "")), node) for g in gpus]
        return any(domains.count(d) >= 2 for d in set(domains))

    def fenced(self, node: str, gid: str | None) -> bool:
        return node in self.fenced_nodes or (gid is not None and (node, gid) in self.fenced_gpus)


def _unusual(m: ev.GpuMetrics) -> bool:
    """An NVML reading that says something of its GPU (what a healthy fleet's samples never show)."""
    return any(x for x in (m.ecc_sbe_volatile, m.ecc_dbe_volatile, m.ecc_dbe_aggregate, m.remapped_rows_pending,
                           m.remapped_rows_failure, m.clocks_event_reasons)) or (m.temperature_c or 0) >= 85


def _save(w: Watch, cmd: Command, asked: set[str]) -> list[str]:
    """``save``: the job is live and uses the node named; one request per incident."""
    job, node = cmd.target.job, cmd.target.node
    bad = []
    if job is None or node is None or node not in w.alloc.get(job, {}):
        bad.append(f"checkpoint_now {cmd.id} asks {job} about {node}, which its allocation does not hold")
    elif job in w.ended or w.live.get(job) is False:
        bad.append(f"checkpoint_now {cmd.id} asks {job}, whose run is over")
    if cmd.incident in asked:
        bad.append(f"a second checkpoint_now for incident {cmd.incident}")
    asked.add(cmd.incident)
    return bad


def _mode(w: Watch, cmd: Command) -> list[str]:
    """``mode``: in place only when none of the job's own hardware is left out."""
    if cmd.params.get("mode") != "in_process" or cmd.target.job is None:
        return []
    ex = cmd.params.get("exclude") or {}
    own = w.alloc.get(cmd.target.job, {})
    ids = {w.uuid.get((n, i)) for n, gpus in own.items() for i in gpus} | {str(i) for gpus in own.values() for i in gpus}
    hit = [n for n in ex.get("nodes", []) if n in own] + [g for g in ex.get("gpus", []) if g in ids]
    return [f"restart {cmd.id} comes back in_process while leaving out its own {hit}"] if hit else []


def _restart(w: Watch, cmd: Command) -> dict[str, list[str]]:
    """Every invariant's violations by one restart, judged on what had arrived and been decided before it."""
    job = cmd.target.job or ""
    inc = w.incidents.get(cmd.incident)
    out: dict[str, list[str]] = {k: [] for k in ("gate", "fenced_first", "checkpoint", "world", "ended")}
    if job in w.ended:
        out["ended"].append(f"restart of {job} after its run was {w.ended[job]}")
    # judged at its issue time: past the capture's last line, end of capture moved the clock on
    w.clock = max(w.clock or cmd.issued_at, cmd.issued_at)
    for why in _restart_violations(w, cmd, lambda n, i: w.uuid.get((n, i), f"{n}:{i}")):
        key = "fenced_first" if "fatal XID" in why else "checkpoint" if " step " in why else "gate"
        out[key].append(why)
    if inc is None:
        return out
    ex = cmd.params.get("exclude") or {}
    ex_nodes, ex_gpus = set(ex.get("nodes") or ()), set(ex.get("gpus") or ())
    alloc = {**w.first_alloc.get(inc.id, {}), **w.alloc.get(job, {})}
    for node, gpus in sorted(alloc.items()):
        if node in ex_nodes:
            continue
        if node in w.fenced_nodes:
            out["gate"].append(f"restart of {job} lands on cordoned {node}")
        for g in gpus:
            gid = w.uuid.get((node, g), "")
            if (node, gid) in w.fenced_gpus and gid not in ex_gpus:
                out["gate"].append(f"restart of {job} lands on quarantined {node} GPU {g}")
    if inc.category in BLAMING and inc.culprit.node and inc.culprit.node not in ex_nodes:
        left = [g for g in inc.culprit.gpus if g not in ex_gpus]
        if not inc.culprit.gpus or left:
            out["gate"].append(f"restart of {job} lands on blamed {inc.culprit.node} {left or ''} ({inc.category})")
    for node, at in w.sels:
        if job in w.users.get(node, set()) and node not in w.fenced_nodes and node in alloc:
            out["fenced_first"].append(f"restart of {job} before {node} (a hardware SEL at {at:%H:%M:%S}) was cordoned")
    out["checkpoint"] += _newest(w, job, cmd, inc, ex_nodes)
    lo, hi, nproc = w.launcher.get(job, (0, 1 << 30, 1))
    gpus = cmd.params.get("gpus")
    if not isinstance(gpus, int) or not lo <= gpus <= hi or gpus % nproc:
        out["world"].append(f"restart of {job} asks for {gpus} GPUs; its launcher forms {nproc} x n in [{lo}, {hi}]")
    return out


def _newest(w: Watch, job: str, cmd: Command, inc: Incident, ex_nodes: set[str]) -> list[str]:
    """The newest restart point the watcher knows (saved or loaded, not known bad) is the one the restart names."""
    f_at = inc.opened_at
    runs = [r.start for r in w.runs.get(job, []) if r.start > f_at]
    bad_load = {r.loaded for r in w.runs.get(job, []) if r.load_error and r.loaded is not None}
    local = POLICY.checkpoints.node_local_prefixes
    known: list[int] = []
    failed = w.failed.get(job, {})  # step -> its newest failed write: a save after it stands, one before it does not
    for step, path, at in w.saved.get(job, []):
        if not (at <= f_at or (runs and at >= min(runs))) or step in failed and failed[step] >= at \
                or step in bad_load:
            continue
        # stamped before the failure by a trainer whose clock is behind, yet made after it: no restart point
        # (_checkpoint_violations calls it unsafe), and an engine that knows its source lags sees it
        if w.true_saved.get((job, step, path), at) > f_at and not (runs and at >= min(runs)):
            continue
        node = w.writer.get((job, step))
        if path and any(path.startswith(p) for p in local) and node and (node in ex_nodes or node in w.fenced_nodes):
            continue
        known.append(step)
    # a loaded checkpoint is a restart point like a save (#25 class 7), under the same node-local rule
    known += [s for s, path, node, at in w.loaded.get(job, []) if at <= f_at and s not in bad_load
              and not (s in failed and failed[s] >= at)
              and not (path and any(path.startswith(p) for p in local) and node
                       and (node in ex_nodes or node in w.fenced_nodes))]
    if not known:
        return []
    ck = cmd.params.get("checkpoint")
    if not ck:
        return [f"restart of {job} from nothing; step {max(known)} is known"]
    if int(ck["step"]) < max(known):
        return [f"restart of {job} from step {ck['step']}; step {max(known)} is newer"]
    return []


def _incident(w: Watch, inc: Incident) -> list[str]:
    """A new incident that an existing fence, or its job's hardware incident, already explains."""
    bad = []
    units: list[tuple[str, str | None]] = [(inc.culprit.node, g) for g in inc.culprit.gpus] if inc.culprit.node else []
    if inc.culprit.node and not units and inc.category in NODE_UNIT:
        units = [(inc.culprit.node, None)]
    by = [w.fence_of.get((n, g)) or w.fence_of.get((n, None)) for n, g in units]
    if units and all(w.fenced(n, g) for n, g in units) and all(b is not None for b in by):
        first, at, _ = by[0]  # type: ignore[misc]
        # A job that was on the hardware when it failed has an incident of its own; anything else is the fence's.
        run = (w.runs.get(inc.job or "") or [None])[-1]
        theirs = inc.job is None or inc.job == first.job or (run is not None and run.start > at)
        # Two root causes, two incidents (class 8): the job's incident that fenced for this cause has moved on
        # to another root cause since, and this cause got its own incident -- the split, not a repeat.
        now = w.incidents.get(first.id, first)
        split = inc.job is not None and inc.job == first.job and now.category != first.category
        theirs = theirs and not split
        if theirs and all(b[0].id != inc.id and b[2] == inc.category for b in by if b):
            bad.append(f"incident {inc.id} ({inc.category}, job {inc.job}) for hardware incident {first.id} fenced")
    if inc.category == "training_hang" and inc.job:
        intervals = sum(max(0, len(r) - 1) for r in w.steps.get(inc.job, []))
        last = max((t for r in w.steps.get(inc.job, []) for t in r), default=None)
        spun = w.spun.get(inc.job)
        if intervals < CADENCE_INTERVALS and not (spun and (last is None or spun > last)):
            bad.append(f"hang verdict on {inc.job} after {intervals} step intervals, uncorroborated")
    return bad


def _consequences(w: Watch) -> list[str]:
    """A checkpoint write that failed because its job's hardware died (not its storage) is that fault's evidence."""
    bad = []
    for inc in w.incidents.values():
        if inc.category != "checkpoint_failure" or not inc.job or any(w in inc.summary for w in STORAGE_WORDS):
            continue  # (one that says its write failed on its own storage is storage's, whatever else failed near)
        for other in w.incidents.values():
            if other.job != inc.job or other.category not in HARDWARE \
                    or abs((inc.opened_at - other.opened_at).total_seconds()) > 120:
                continue
            near = [err for t, err in w.ckpt_errors.get(inc.job, [])
                    if abs((t - other.opened_at).total_seconds()) <= 120]
            if near and not any(word in err for err in near for word in STORAGE_WORDS):
                bad.append(f"checkpoint_failure {inc.id} of {inc.job} is a consequence of {other.category} {other.id}")
                break
    return bad


def _tickets(w: Watch, commands: list[Command]) -> list[str]:
    seen: dict[tuple[str, ...], str] = {}
    bad = []
    for c in commands:
        if c.type != "open_ticket":
            continue
        cat, nodes, gpus = c.params.get("category"), c.params.get("nodes") or [], c.params.get("gpus") or []
        node = c.target.node or (nodes[0] if nodes else None)
        if node is None:
            continue
        units: set[tuple[str, ...]]
        if cat == "power_supply_fault" and gpus:
            units = {("psu", w.domain.get((node, g), node)) for g in gpus}
        elif gpus and cat not in NODE_UNIT:
            units = {("gpu", node, g) for g in gpus}
        else:
            units = {("node", n) for n in nodes or [node]}
        for u in sorted(units):
            if u in seen:
                bad.append(f"second repair ticket {c.id} for {u} (first {seen[u]})")
            seen.setdefault(u, c.id)
    return bad


def events_of(lines: list[str]) -> list[ev.Event]:
    """The capture's events as the offline path screens them, and its end-of-capture marker."""
    out = [e for v in CaptureScreen().screen(x.encode() for x in lines) if isinstance(v, Accepted) for e in v.events]
    if out:
        out.append(ev.Event(id=f"end-{len(lines)}", ts=out[-1].ts, source="replay", body=ev.EndOfCapture(lines=len(lines))))
    return out


def _fresh() -> PartitionState:
    return PartitionState(0, lambda: Correlator(POLICY), "fleet")


def _sealed(state: PartitionState) -> bytes:
    position, cells, body = capture_engines(state)
    return seal(0, position, cells, body, FINGERPRINT, None)


def _taken_over(blob: bytes, events: list[ev.Event], cut: int) -> list[Incident | Command]:
    """What a worker restored from ``blob`` (sealed after ``events[:cut]``) decides from there on."""
    b = _fresh()
    restore(b, open_snapshot(blob, 0, FINGERPRINT, None))
    out: list[Incident | Command] = []
    for i, e in enumerate(events[cut:], cut):
        out += b.judge(i, b"fleet", e).decisions
    return out


def _collated(decisions: list[Incident | Command]) -> str:
    return json.dumps(collate([d for d in decisions if isinstance(d, Incident)],
                              [d for d in decisions if isinstance(d, Command)]))


def evaluate(lines: list[str], cut: float = 0.5, again: bool = True,
             skew: tuple[str, float] | None = None) -> dict[str, list[str]]:
    """Every invariant's violations over one capture: the worker's path (a partition state, one cell) judges it
    event by event beside the watcher, is snapshotted at ``cut`` (a fraction of the events) and a worker
    restored from the snapshot judges the rest again; ``again``: the bytes also run a second time offline.
    ``skew``: the source the plan skewed and by how much (:attr:`Watch.skew`)."""
    bad: dict[str, list[str]] = {k: [] for k in INVARIANTS}
    events = events_of(lines)
    worker, w = _fresh(), Watch(skew=skew)
    at = max(1, int(len(events) * cut))
    blob, after = b"", 0
    decided: list[Incident | Command] = []
    asked: set[str] = set()
    fences: list[Command] = []
    for i, e in enumerate(events):
        if i == at:
            blob, after = _sealed(worker), len(decided)
        for d in worker.judge(i, b"fleet", e).decisions:  # decided before the event is seen: it came before them
            if isinstance(d, Command) and d.type == "restart_job":
                for k, v in _restart(w, d).items():
                    bad[k] += v
                bad["mode"] += _mode(w, d)
            elif isinstance(d, Command) and d.type == "checkpoint_now":
                bad["save"] += _save(w, d, asked)
            elif isinstance(d, Command) and d.type in ("cordon_node", "quarantine_gpu") and d.target.node:
                fences.append(d)  # judged with this event seen: it may be the evidence that decided it
            elif isinstance(d, Incident) and d.id not in w.incidents:
                for why in _incident(w, d):
                    bad["hang" if "hang verdict" in why else "explained"].append(why)
            w.decided(d)
            decided.append(d)
            if (n := len(d.model_dump_json().encode())) > MAX_RECORD_BYTES:
                bad["size"].append(f"{type(d).__name__} {d.id} is {n} bytes")
        w.see(e)
        for d in fences:
            node, gid, why = d.target.node or "", d.target.gpu, f"for {d.params.get('reason')} ({d.incident})"
            if gid is None and not w.cordon_cause(node, d.issued_at):
                bad["cordon"].append(f"{node} cordoned at {d.issued_at:%H:%M:%S} {why} with no evidence of the node")
            elif gid is not None and not w.quarantine_cause(node, gid, d.issued_at):
                bad["quarantine"].append(f"{gid} of {node} quarantined at {d.issued_at:%H:%M:%S} {why} with no "
                                         "evidence of the GPU")
        fences.clear()
    out = json.loads(_collated(decided))
    bad["explained"] += _same_hardware_violations(w, out)
    bad["consequence"] += _consequences(w)
    bad["tickets"] += _tickets(w, [d for d in decided if isinstance(d, Command)])
    if blob:
        theirs = [d.model_dump_json() for d in _taken_over(blob, events, at)]
        if theirs != [d.model_dump_json() for d in decided[after:]]:
            bad["same"].append(f"a worker taking over at event {at} decides otherwise")
    if again and json.dumps(decide_offline(lines)) != json.dumps(out):
        bad["same"].append("a second run of the same bytes decides otherwise")
    return {k: v for k, v in bad.items() if v}
