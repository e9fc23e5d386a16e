"""Properties that hold for any capture: random fleets, random faults, random delivery (late, duplicated).

(a) a restart comes after every fence of its incident and excludes every GPU and node fenced before it;
(b) no restart asks for hardware under quarantine (it excludes all of it);
(c) at most one open incident per (job, category), and one open failure per job, at any time;
(d) the same input gives byte-identical output, and re-sent lines change nothing;
(e) reset_gpu and reboot_node always require approval;
(f) command ids are unique, and every command serves an incident that was published;
and, for the restart gate (an oracle of its own that reads the capture, not the engine's state):
(g) no restart includes a node or GPU of the failed allocation that was not heard from after the
    failure by a detector able to speak for it (heartbeat, NVML), nor one that is suspect (not ready,
    BMC unreachable or off, a hardware SEL or machine check since the failure): it is left out;
(h) every GPU with a fatal XID in a job's allocation is fenced before that job's next restart;
(i) a restart's checkpoint was saved before the failure, not failed, not failed to load, and of the
    job's current lineage (no later run loaded an older step or saved at its step or below);
(j) one incident per job and root cause: no later incident of a job blames hardware an earlier
    incident of the same job fenced (the scheduler putting the job back on it is that incident's).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from builder import Capture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from correlators.engine import Correlator
from correlators.findings import FAILURE_CATEGORIES
from correlators.policy import load_policy
from faultline.outcome import collate, decide_offline
from producers.capture.screen import Accepted, CaptureScreen
from streams import events as ev
from streams.decisions import Command, Incident

FENCES = ("quarantine_gpu", "cordon_node")
DONE = ("resolved", "closed", "escalated")
RACKS = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}
XIDS = [79, 79, 48, 63, 74, 92, 94, 95, 119, 13, 31, 43]


def _fault(cap: Capture, rnd: random.Random, jobs: list[str]) -> None:
    """One random fault, worded as its source writes it, at a random time."""
    t = rnd.uniform(350, 1100)
    node = rnd.choice(sorted(cap.nodes))
    gpu = rnd.randrange(8)
    job = rnd.choice(jobs)
    rank = rnd.choice(cap.jobs[job].ranks)
    kind = rnd.choice(["xid", "xid", "xid_crash", "xid_crash", "crash", "nccl", "oom", "silence", "psu",
                       "dbe", "hot", "ckpt", "nan", "hang", "failed", "restart", "exception", "rack",
                       "vanish", "not_ready", "rollback", "load_fail", "second_xid", "slow", "spin", "slow_agent"])
    if kind == "xid":
        cap.xid(t, node, gpu, rnd.choice(XIDS), prefix=rnd.choice(["", "syslog", "dmesg", "kmsg"]))
    elif kind == "xid_crash":
        n, g = cap.jobs[job].place(rank)
        cap.xid(t, n, g, rnd.choice(XIDS)).crash(t + rnd.uniform(0.1, 3), job, rank)
    elif kind == "crash":
        cap.crash(t, job, rank, error=rnd.choice(["RuntimeError: CUDA error: unknown error", None,
                                                  "ValueError: bad shape"]))
    elif kind == "nccl":
        others = [r for r in cap.jobs[job].ranks if r != rank]
        if rnd.random() < 0.5:
            cap.nccl_timeout(t, job, missing=[rank])
        else:
            cap.nccl_timeout(t, job, behind=[rank] if others else [])
    elif kind == "oom":
        cap.cuda_oom(t, job, rank)
    elif kind == "silence":
        cap.silence(t, node)
        how = rnd.choice(["power", "unreachable", "sel", "none"])
        if how == "power":
            cap.bmc_power(t + 20, node)
        elif how == "unreachable":
            cap.bmc_unreachable(t + 20, node)
        elif how == "sel":
            cap.sel(t - 1, node, rnd.choice(["memory", "cpu", "psu", "board"]))
    elif kind == "psu":
        cap.sel(t, node, "psu")
        for g in rnd.sample([4, 5, 6, 7], rnd.randint(0, 4)):
            cap.xid(t + 0.01, node, g, 79)
    elif kind == "dbe":
        cap.metric(t, node, gpu, ecc_dbe_volatile=rnd.randint(1, 3))
    elif kind == "hot":
        cap.metric(t, node, gpu, temperature_c=92.0).metric(t + rnd.choice([60, 400]), node, gpu, temperature_c=60.0)
    elif kind == "ckpt":
        cap.checkpoint_failed(t, job, 1000)
    elif kind == "nan":
        cap.nan_loss(t, job)
    elif kind == "hang":
        cap.stop_training(job, t)
    elif kind == "failed":
        cap.scheduler(t, "job_failed", job=job)
    elif kind == "restart":
        cap.job(job, {n: g for n, g, _ in cap.jobs[job].alloc}, at=t)
    elif kind == "exception":
        cap.exception(t, job, rank)
    elif kind == "rack":
        rack = cap.nodes[node]["rack"]
        for n in sorted(cap.nodes):
            if cap.nodes[n]["rack"] == rack:
                cap.silence(t, n).bmc_unreachable(t + rnd.uniform(5, 120), n)
    else:
        _gate_fault(cap, rnd, kind, t, node, gpu, job, rank)


MISSING_KEYS = "RuntimeError: Error(s) in loading state_dict for GPT: Missing key(s) in state_dict: \"w1\"."


def _gate_fault(cap: Capture, rnd: random.Random, kind: str, t: float, node: str, gpu: int, job: str,
                rank: int) -> None:
    """The faults of the restart gate's issues: what could still speak, fences, checkpoints, recoveries."""
    alloc = {n: g for n, g, _ in cap.jobs[job].alloc}
    n, g = cap.jobs[job].place(rank)
    if kind == "vanish":
        cap.vanish(t, n, g)
        if rnd.random() < 0.7:
            cap.crash(t + rnd.uniform(0.5, 5), job, rank)
    elif kind == "not_ready":  # the scheduler says one of the job's nodes (or another) is not ready
        where = rnd.choice([*alloc, node])
        cap.scheduler(t, "node_not_ready", node=where)
        if rnd.random() < 0.3:
            cap.scheduler(t + rnd.uniform(10, 200), "node_ready", node=where)
        if rnd.random() < 0.8:
            cap.crash(t + rnd.uniform(1, 30), job, rank, error="ValueError: bad shape")
    elif kind == "rollback":
        older = cap.checkpoint_before(job, t - 300)
        if older is not None:
            cap.job(job, alloc, at=t, resume_step=older[1], announce_load=rnd.random() < 0.5)
            cap.xid(t + rnd.uniform(60, 300), n, g, 79).crash(t + 301, job, rank)
    elif kind == "load_fail":
        ck = cap.checkpoint_before(job, t)
        cap.job(job, alloc, at=t, train=False)
        if ck is not None and rnd.random() < 0.7:
            cap.checkpoint_loaded(t + 5, job, ck[1])
        cap.crash(t + 15, job, rank=rnd.choice(cap.jobs[job].ranks), error=MISSING_KEYS)
    elif kind == "second_xid":
        cap.xid(t, n, g, 79).crash(t + 1, job, rank)
        other = rnd.choice([(nn, gg) for nn, gs in alloc.items() for gg in gs if (nn, gg) != (n, g)] or [(n, g)])
        cap.xid(t + rnd.uniform(5, 60), other[0], other[1], rnd.choice([48, 79, 95, 74]))
    elif kind == "slow":
        cap.slow(t, job, rnd.choice([0.4, 0.6, 0.9]))
    elif kind == "spin":
        cap.spin(t, job)
    elif kind == "slow_agent":  # a node whose agent went quiet a little before the job crashed
        cap.silence(t, n)
        cap.crash(t + rnd.uniform(0.5, 10), job, rank, error="RuntimeError: NCCL communicator was aborted")


def random_capture(seed: int) -> list[str]:
    """A random fleet, jobs, one to four faults and a random delivery, all from ``seed``."""
    rnd = random.Random(seed)
    n_nodes = rnd.randint(2, 4)
    cap = Capture(duration=1500)
    for k in range(n_nodes):
        cap.node(f"n{k + 1}", rack=RACKS[f"n{k + 1}"])
    cap.heartbeats(15).nvml(60)
    layout = rnd.choice(["one", "span", "shared", "two"])
    if layout == "one":
        cap.job("a", ["n1"])
    elif layout == "span":
        cap.job("a", ["n1", "n2"], elastic=(8, 16))
    elif layout == "shared":
        cap.job("a", {"n1": [0, 1, 2, 3]}, max_restarts=1).job("b", {"n1": [4, 5, 6, 7]})
    else:
        cap.job("a", ["n1"]).job("b", ["n2"], elastic=(4, 8))
    jobs = sorted(cap.jobs)
    for _ in range(rnd.randint(1, 4)):
        _fault(cap, rnd, jobs)
        if rnd.random() < 0.3:
            cap.late(rnd.uniform(1, 40))
        if rnd.random() < 0.3:
            cap.dup(rnd.uniform(0, 20))
    if rnd.random() < 0.5:
        cap.skew(rnd.choice(["kernel", "torchelastic", "framework", "bmc", "nvml"]), rnd.uniform(-30, 30))
    return cap.lines()


def captures() -> st.SearchStrategy[list[str]]:
    return st.integers(0, 2**32 - 1).map(random_capture)


def _stepwise(lines: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Run the engine event by event, checking (c) after every event; the output and the violations."""
    state: dict[str, Incident] = {}
    bad: list[str] = []

    def check(decisions: list[Incident | Command]) -> None:
        for d in decisions:
            if isinstance(d, Incident):
                state[d.id] = d
        live = [i for i in state.values() if i.job and i.state not in DONE]
        for key, n in Counter((i.job, i.category) for i in live).items():
            if n > 1:
                bad.append(f"{n} open incidents for {key}")
        # one failure incident per job and root cause: a second root cause's own incident (named by the
        # job's incident among its faults) shares its restart, and is no second failure
        second = {f.incident for i in live for f in i.faults if f.incident}
        for job, n in Counter(i.job for i in live if i.category in FAILURE_CATEGORIES and i.id not in second).items():
            if n > 1:
                bad.append(f"{n} open failure incidents for job {job}")

    return decide_offline(lines, on_decisions=check), bad


def _fence_violations(out: dict[str, Any]) -> list[str]:
    bad: list[str] = []
    cmds = out["commands"]
    gpus: set[tuple[str, str]] = set()
    nodes: set[str] = set()
    for k, c in enumerate(cmds):
        tgt = c["target"]
        if c["type"] == "quarantine_gpu":
            gpus.add((tgt["node"], tgt["gpu"]))
        elif c["type"] == "cordon_node":
            nodes.add(tgt["node"])
        elif c["type"] == "restart_job":
            ex = c["params"]["exclude"]
            missing_nodes = nodes - set(ex["nodes"])
            missing_gpus = {g for n, g in gpus if n not in ex["nodes"] and g not in ex["gpus"]}
            if missing_nodes or missing_gpus:
                bad.append(f"restart #{k} of {tgt['job']} does not exclude {missing_nodes or ''} {missing_gpus or ''}")
            later = [j for j, f in enumerate(cmds) if j > k and f["type"] in FENCES and f["incident"] == c["incident"]]
            # hardware fenced after the restart went out: restart again (avoiding it) or tell a person
            if later and not any(r["type"] in ("restart_job", "notify") and r["incident"] == c["incident"]
                                 for r in cmds[later[-1] + 1:]):
                bad.append(f"{cmds[later[-1]]['type']} of incident {c['incident']} after its last restart, "
                           "and neither a new restart nor a notify follows")
    return bad


def _other_violations(out: dict[str, Any]) -> list[str]:
    bad = []
    ids = [c["id"] for c in out["commands"]]
    if len(ids) != len(set(ids)):
        bad.append("duplicate command ids")
    published = {i["id"] for i in out["incidents"]}
    for c in out["commands"]:
        if c["type"] in ("reset_gpu", "reboot_node") and not c["requires_approval"]:
            bad.append(f"{c['type']} without approval")
        if c["incident"] not in published:
            bad.append(f"{c['type']} serves unpublished incident {c['incident']}")
    return bad


COMMON = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@COMMON
@given(captures())
def test_fences_restarts_and_open_incidents(lines: list[str]) -> None:
    out, open_bad = _stepwise(lines)
    bad = open_bad + _fence_violations(out) + _other_violations(out)
    assert not bad, "\n".join(bad[:10])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(captures(), st.integers(0, 2**16))
def test_deterministic_and_duplicates_change_nothing(lines: list[str], seed: int) -> None:
    first = json.dumps(decide_offline(lines))
    assert json.dumps(decide_offline(list(lines))) == first
    doubled = [x for line in lines for x in (line, line)]
    assert json.dumps(decide_offline(doubled)) == first
    rnd = random.Random(seed)
    keyed = [(float(k), line) for k, line in enumerate(lines)]
    keyed += [(rnd.uniform(k + 0.5, len(lines)), lines[k]) for k in rnd.sample(range(len(lines)), min(len(lines), 50))]
    resent = [line for _, line in sorted(keyed, key=lambda x: x[0])]
    assert json.dumps(decide_offline(resent)) == first


def test_the_checks_catch_violations() -> None:
    """The property checks are not vacuous: a hand-made bad output fails each of them."""
    def cmd(i: int, t: str, inc: str = "i1", approval: bool = False, **target: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"exclude": {"nodes": [], "gpus": []}} if t == "restart_job" else {}
        return {"id": f"c{i}", "incident": inc, "type": t, "target": {"job": "a", "node": None, "gpu": None, **target},
                "requires_approval": approval, "params": params}
    out = {"incidents": [{"id": "i1"}], "commands": [
        cmd(1, "quarantine_gpu", node="n1", gpu="GPU-1"), cmd(2, "restart_job"),
        cmd(3, "cordon_node", node="n2"), cmd(3, "reboot_node", node="n2"), cmd(4, "notify", inc="i9")]}
    fences = _fence_violations(out)
    assert any("does not exclude" in b for b in fences) and any("after its last restart" in b for b in fences)
    others = _other_violations(out)
    assert any("duplicate" in b for b in others) and any("without approval" in b for b in others)
    assert any("unpublished" in b for b in others)


_HASH_SCRIPT = """
import hashlib, json, sys
sys.path.insert(0, ".")
from scenario_book import SCENARIOS
from faultline.outcome import collate, decide_offline
h = hashlib.sha256()
for name in sys.argv[1:]:
    cap, _ = SCENARIOS[name]()
    h.update(json.dumps(decide_offline(cap.lines())).encode())
print(h.hexdigest())
"""


def test_same_bytes_under_any_hash_seed() -> None:
    """Ids and orders never depend on set or dict iteration of strings (PYTHONHASHSEED)."""
    names = ["rack_outage", "two_jobs_one_node_node_fault", "xid95_two_gpus_two_nodes", "network_timeout_rank_behind"]
    digests = set()
    for seed in ("0", "12345"):
        run = subprocess.run([sys.executable, "-c", _HASH_SCRIPT, *names], cwd=Path(__file__).parent,
                             env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        digests.add(run.stdout.strip())
    assert len(digests) == 1


# --- (g)-(j): the restart gate, by an oracle that reads the capture ------------------------------------------
POLICY = load_policy()
FATAL_XIDS = {code for code, cat in POLICY.xid.items() if cat in FAILURE_CATEGORIES} - set(POLICY.xid_needs_pending_remap)
LOOKBACK = timedelta(seconds=POLICY.timing.hardware_lookback_s)


@dataclass
class _Run:
    start: datetime
    loaded: int | None = None
    stepped: bool = False
    saves: list[int] = field(default_factory=list)
    load_error: bool = False


@dataclass
class _Oracle:
    """What the capture said so far, in arrival order: the facts the invariants are judged against."""

    alloc: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    pci: dict[str, dict[str, int]] = field(default_factory=dict)
    heartbeats: dict[str, list[datetime]] = field(default_factory=dict)
    samples: dict[str, dict[int, list[datetime]]] = field(default_factory=dict)
    not_ready: set[str] = field(default_factory=set)
    bmc_bad: set[str] = field(default_factory=set)
    hardware_at: dict[str, list[datetime]] = field(default_factory=dict)
    xids: list[tuple[str, str, int]] = field(default_factory=list)  # (job, node, GPU index) of fatal XIDs
    saved: dict[str, list[tuple[int, str | None, datetime]]] = field(default_factory=dict)
    # (job, step, path) -> when a save of a source whose clock the capture skewed really happened
    true_saved: dict[tuple[str, int, str | None], datetime] = field(default_factory=dict)
    # job -> (stamp, when it happened) of each step of a source whose clock the capture skewed
    true_stepped: dict[str, list[tuple[datetime, datetime]]] = field(default_factory=dict)
    # job -> (step, path, when, the run that loaded it): a checkpoint a run loaded is a restart point (#25 class 7)
    loads: dict[str, list[tuple[int, str | None, datetime, _Run]]] = field(default_factory=dict)
    failed: dict[str, dict[int, datetime]] = field(default_factory=dict)  # job -> step -> its newest failed write
    runs: dict[str, list[_Run]] = field(default_factory=dict)
    fenced_gpus: set[tuple[str, str]] = field(default_factory=set)
    fenced_nodes: set[str] = field(default_factory=set)
    incidents: dict[str, Incident] = field(default_factory=dict)
    first_alloc: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # incident -> alloc when published
    clock: datetime | None = None
    # job -> its run's lines that arrived before the job_started that begins the run (a late scheduler line):
    # facts of that run all the same, judged once it is known
    early: dict[str, list[ev.Event]] = field(default_factory=dict)

    def index(self, node: str | None, ref: ev.GpuRef) -> int | None:
        if node is None:
            return None
        if ref.pci and ref.pci in self.pci.get(node, {}):
            return self.pci[node][ref.pci]
        return ref.index

    def see(self, e: ev.Event) -> None:
        b, node, job = e.body, e.node, e.job
        self.clock = max(self.clock or e.ts, e.ts)
        if isinstance(b, ev.Inventory) and node:
            self.pci[node] = {g.pci: g.index for g in b.gpus if g.pci}
        elif isinstance(b, ev.JobStarted) and job:
            self.alloc[job] = {a.node: list(a.gpus) for a in b.allocation}
            self.runs.setdefault(job, []).append(_Run(e.ts))
            for x in self.early.pop(job, []):  # the job had no run before: they are its first run's, whatever
                _Oracle.see(self, x)            # their stamps say (a trainer's clock behind the scheduler's)
        elif isinstance(b, ev.AgentHeartbeat) and node:
            self.heartbeats.setdefault(node, []).append(e.ts)
        elif isinstance(b, ev.GpuSample) and node and (i := self.index(node, b.gpu)) is not None:
            self.samples.setdefault(node, {}).setdefault(i, []).append(e.ts)
        elif isinstance(b, ev.NodeState) and node:
            (self.not_ready.discard if b.ready else self.not_ready.add)(node)
        elif isinstance(b, ev.BmcPower | ev.BmcUnreachable | ev.BmcSel) and node:
            bad = isinstance(b, ev.BmcUnreachable) or (isinstance(b, ev.BmcPower) and not b.on)
            (self.bmc_bad.add if bad else self.bmc_bad.discard)(node)
            if isinstance(b, ev.BmcSel) and b.hardware_fault and b.asserted:
                self.hardware_at.setdefault(node, []).append(e.ts)
        elif isinstance(b, ev.KernelFault) and node and b.fault == "machine_check" and b.severity in ("uncorrected",
                                                                                                       "fatal"):
            self.hardware_at.setdefault(node, []).append(e.ts)
        elif isinstance(b, ev.Xid) and node and b.code in FATAL_XIDS and (i := self.index(node, b.gpu)) is not None:
            self.xids += [(j, node, i) for j, a in self.alloc.items() if i in a.get(node, [])]
        elif job and not self.runs.get(job) and isinstance(b, ev.TrainStep | ev.CheckpointLoaded | ev.CheckpointSaved
                                                           | ev.CheckpointFailed | ev.WorkerExit):
            self.early.setdefault(job, []).append(e)
        elif job and (run := (self.runs.get(job) or [None])[-1]) is not None:
            if isinstance(b, ev.TrainStep) and e.ts >= run.start:
                run.stepped = True
            elif isinstance(b, ev.CheckpointLoaded) and b.step is not None:
                run.loaded = b.step
                self.loads.setdefault(job, []).append((b.step, b.path, e.ts, run))
            elif isinstance(b, ev.CheckpointSaved):
                self.saved.setdefault(job, []).append((b.step, b.path, e.ts))
                run.saves.append(b.step)
            elif isinstance(b, ev.CheckpointFailed) and b.step is not None:
                self.failed.setdefault(job, {})[b.step] = e.ts
            elif isinstance(b, ev.WorkerExit) and b.error and "state_dict" in b.error and not run.stepped:
                run.load_error = True

    def decided(self, d: Incident | Command) -> None:
        if isinstance(d, Incident):
            if d.id not in self.incidents and d.job in self.alloc:
                self.first_alloc[d.id] = dict(self.alloc[d.job])
            self.incidents[d.id] = d
        elif d.type == "quarantine_gpu" and d.target.node and d.target.gpu:
            self.fenced_gpus.add((d.target.node, d.target.gpu))
        elif d.type == "cordon_node" and d.target.node:
            self.fenced_nodes.add(d.target.node)


def _heard(times: list[datetime], since: datetime) -> bool:
    return any(t >= since for t in times)


def _cadence(times: list[datetime], before: datetime) -> float | None:
    early = sorted(t for t in times if t < before)
    gaps = [(b - a).total_seconds() for a, b in zip(early, early[1:], strict=False) if b > a]
    return sorted(gaps)[len(gaps) // 2] if len(gaps) >= 3 else None


def _restart_violations(o: _Oracle, cmd: Command, gpu_id: Any) -> list[str]:
    bad: list[str] = []
    job = cmd.target.job or ""
    inc = o.incidents.get(cmd.incident)
    if inc is None:
        return [f"restart of {job} for an unpublished incident"]
    f_at = inc.opened_at
    ex = cmd.params.get("exclude") or {}
    out_nodes, out_gpus = set(ex.get("nodes") or ()), set(ex.get("gpus") or ())
    now = o.clock or f_at
    failed = o.first_alloc.get(inc.id, {})
    current = o.alloc.get(job, {})
    for node in sorted(set(failed) & set(current)):
        if node in out_nodes or node in o.fenced_nodes:
            continue
        suspect = [why for why, yes in (("not ready", node in o.not_ready), ("BMC unreachable or off", node in o.bmc_bad),
                                        ("hardware fault logged", any(t >= f_at - LOOKBACK
                                                                      for t in o.hardware_at.get(node, ()))))
                   if yes]
        if suspect:
            bad.append(f"restart of {job} includes suspect {node} ({', '.join(suspect)})")
        beats = o.heartbeats.get(node, [])
        cad = _cadence(beats, f_at)
        alive = cad is not None and any(t >= f_at - timedelta(seconds=max(60.0, 3 * cad)) for t in beats)
        if alive and not _heard(beats, f_at):
            bad.append(f"restart of {job} includes {node}, not heard from since the failure at {f_at}")
        on_node = o.samples.get(node, {})
        for g in sorted(set(failed[node]) & set(current[node])):
            gid = gpu_id(node, g)
            if gid in out_gpus or (node, gid) in o.fenced_gpus:
                continue
            times = on_node.get(g, [])
            cad = _cadence(times, f_at)
            if cad is None or not any(t >= f_at - timedelta(seconds=2.5 * cad) for t in times):
                continue  # NVML could not speak for it
            newest = max((t for ts in on_node.values() for t in ts), default=None)
            if newest is None or (now - newest).total_seconds() > 2.5 * cad:
                continue  # the node's NVML is quiet as a whole: not a detector that can speak now
            if not _heard(times, f_at):
                bad.append(f"restart of {job} includes {node} GPU {g}, no NVML sample since the failure at {f_at}")
    for j, node, g in o.xids:
        if j == job and node not in o.fenced_nodes and (node, gpu_id(node, g)) not in o.fenced_gpus:
            bad.append(f"restart of {job} before {node} GPU {g} (a fatal XID) was fenced")
    ck = cmd.params.get("checkpoint")
    if ck:
        bad += _checkpoint_violations(o, job, int(ck["step"]), ck.get("path"), f_at)
    return bad


def _checkpoint_violations(o: _Oracle, job: str, step: int, path: str | None, f_at: datetime) -> list[str]:
    # a save is judged when it happened: its stamp, or its true time where the capture skewed its source's clock
    saves = [o.true_saved.get((job, s, p), t) for s, p, t in o.saved.get(job, [])
             if s == step and (path is None or p == path)]
    # A checkpoint a run loaded without error exists and is valid (issue #25 class 7): a restart point like a save.
    saves += [t for s, p, t, run in o.loads.get(job, []) if s == step and (path is None or p is None or p == path)
              and not run.load_error]
    if not saves:
        return [f"restart of {job} from step {step}, never saved or loaded"]
    # The job was still running when a step it reported before the failure's date really happened: with its
    # trainer's clock behind, the engine cannot know that its date is early, and a save before that step is safe.
    f_at = max([f_at] + [true for stamp, true in o.true_stepped.get(job, []) if stamp <= f_at])
    # saved before the failure began, or by a run that started after it (the job ran again in between)
    rerun = [r.start for r in o.runs.get(job, []) if r.start > f_at]
    before = [t for t in saves if t <= f_at or (rerun and t >= min(rerun))]
    if not before:
        return [f"restart of {job} from step {step}, saved after the failure began"]
    saved_at = max(before)  # the same path saved again (a later lineage) is the later file
    bad = []
    failed_at = o.failed.get(job, {}).get(step)
    if failed_at is not None and failed_at >= saved_at:  # (a save of the step after its failed write stands)
        bad.append(f"restart of {job} from step {step}, whose write failed")
    for run in o.runs.get(job, []):
        if run.start <= saved_at:
            continue
        if run.loaded is not None and run.loaded < step:
            bad.append(f"restart of {job} from step {step} of an abandoned lineage (a later run loaded {run.loaded})")
        elif run.saves and min(run.saves) <= step:
            bad.append(f"restart of {job} from step {step} of an abandoned lineage (a later run saved {min(run.saves)})")
        if run.loaded == step and run.load_error:
            bad.append(f"restart of {job} from step {step}, which failed to load")
    return bad


def _same_hardware_violations(o: _Oracle, out: dict[str, Any]) -> list[str]:
    fenced_by: dict[str, set[tuple[str, str | None]]] = {}
    for c in out["commands"]:
        if c["type"] in FENCES:
            fenced_by.setdefault(c["incident"], set()).add((c["target"]["node"], c["target"]["gpu"]))
    bad = []
    incs = sorted(out["incidents"], key=lambda i: i["opened_at"])
    for k, b in enumerate(incs):
        if b["job"] is None or b["category"] not in FAILURE_CATEGORIES or b["culprit"]["node"] is None:
            continue
        hw = {(b["culprit"]["node"], g) for g in b["culprit"]["gpus"]} or {(b["culprit"]["node"], None)}
        for a in incs[:k]:
            if a["job"] != b["job"] or a["id"] == b["id"] or b["id"] in {f.get("incident") for f in a.get("faults", [])} \
                    or a["id"] in {f.get("incident") for f in b.get("faults", [])}:
                continue  # (a second root cause's incident is fenced in the name of the job's incident)
            fenced = fenced_by.get(a["id"], set())
            nodes = {n for n, g in fenced if g is None}
            if hw and all((n, g) in fenced or n in nodes for n, g in hw):
                bad.append(f"incident {b['id']} of {b['job']} blames hardware incident {a['id']} fenced")
    return bad


def gate_violations(lines: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Run the engine event by event beside the oracle; every restart is judged on what had arrived before it."""
    engine = Correlator(POLICY)
    oracle = _Oracle()
    bad: list[str] = []
    incidents: list[Incident] = []
    commands: list[Command] = []

    def take(decisions: list[Incident | Command]) -> None:
        for d in decisions:
            if isinstance(d, Command) and d.type == "restart_job":
                bad.extend(_restart_violations(oracle, d, engine.state.topology.gpu_id))
            oracle.decided(d)
            (incidents if isinstance(d, Incident) else commands).append(d)  # type: ignore[arg-type]

    events = [e for v in CaptureScreen().screen(x.encode() for x in lines) if isinstance(v, Accepted) for e in v.events]
    for e in events:
        take(engine.process(e))  # the decisions come before the event is judged: it did not arrive before them
        oracle.see(e)
    take(engine.finish())
    out = collate(incidents, commands)
    return out, bad + _same_hardware_violations(oracle, out)


@COMMON
@given(captures())
def test_no_restart_outruns_the_verdict(lines: list[str]) -> None:
    _, bad = gate_violations(lines)
    assert not bad, "\n".join(bad[:10])


def test_the_gate_oracle_catches_violations() -> None:
    """The oracle is not vacuous: a restart that outruns a verdict, skips a fence or names a bad checkpoint fails."""
    t0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
    o = _Oracle(alloc={"a": {"n1": [0, 1]}}, first_alloc={"i": {"n1": [0, 1]}}, clock=t0 + timedelta(seconds=95))
    o.heartbeats["n1"] = [t0 + timedelta(seconds=15 * k) for k in range(6)]  # the last one before the failure
    o.samples["n1"] = {g: [t0 + timedelta(seconds=20 * k) for k in range(4)] for g in (0, 1)}
    o.incidents["i"] = Incident(id="i", job="a", category="software_crash", culprit={"node": None, "gpus": []},
                                opened_at=t0 + timedelta(seconds=80), severity="ticket", state="open")
    o.xids.append(("a", "n1", 1))
    o.not_ready.add("n1")
    o.saved["a"] = [(600, "/ck/600", t0 + timedelta(seconds=90))]
    cmd = Command(id="c", incident="i", type="restart_job", target={"job": "a"}, issued_at=t0,
                  params={"checkpoint": {"step": 600, "path": "/ck/600"}, "exclude": {"nodes": [], "gpus": []}})
    bad = _restart_violations(o, cmd, lambda n, i: f"{n}:{i}")
    for words in ("suspect n1", "not heard from", "no NVML sample", "XID", "saved after the failure"):
        assert any(words in b for b in bad), (words, bad)


def lineage_capture(seed: int) -> list[str]:
    """A job that checkpoints often, is rolled back (saying so or not), may fail to load or to write a
    checkpoint, and then loses hardware: every restart's checkpoint is judged by (i)."""
    rnd = random.Random(seed)
    cap = Capture(duration=2400)
    for k in range(3):
        cap.node(f"n{k + 1}", rack=RACKS[f"n{k + 1}"])
    cap.heartbeats(15).nvml(30)
    interval = rnd.choice([120.0, 180.0, 300.0])
    cap.job("a", ["n1", "n2"], interval=interval, elastic=(8, 16))
    t = rnd.uniform(500, 900)
    for _ in range(rnd.randint(1, 2)):
        older = cap.checkpoint_before("a", t - rnd.uniform(100, 400))
        if older is not None:
            cap.job("a", ["n1", "n2"], at=t, interval=interval, elastic=(8, 16), resume_step=older[1],
                    announce_load=rnd.random() < 0.5)
        t += rnd.uniform(200, 500)
    if rnd.random() < 0.4:
        ck = cap.checkpoint_before("a", t)
        if ck is not None:
            cap.checkpoint_failed(t - 1, "a", ck[1])
    node, gpu = rnd.choice(["n1", "n2"]), rnd.randrange(8)
    cap.xid(t, node, gpu, rnd.choice([79, 48, 95])).crash(t + 1, "a", rank=(0 if node == "n1" else 8) + gpu)
    if rnd.random() < 0.6:  # the restart's run cannot load its checkpoint
        ck = cap.checkpoint_before("a", t)
        others = [n for n in ("n1", "n2", "n3") if n != node]
        cap.job("a", others, at=t + 90, train=False, interval=interval, elastic=(8, 16))
        if ck is not None and rnd.random() < 0.7:
            cap.checkpoint_loaded(t + 95, "a", ck[1])
        cap.crash(t + 100, "a", rank=0, error=MISSING_KEYS)
    if rnd.random() < 0.3:
        cap.late(rnd.uniform(1, 30))
    return cap.lines()


def breach_capture(seed: int) -> list[str]:
    """Hardware fenced, then the scheduler puts the job back on it (once or more) and it fails there, with or
    without a new kernel line: (j) one incident for the same broken hardware, and (g)-(i) for each restart."""
    rnd = random.Random(seed)
    cap = Capture(duration=2400)
    for k in range(3):
        cap.node(f"n{k + 1}", rack=RACKS[f"n{k + 1}"])
    cap.heartbeats(15).nvml(rnd.choice([20.0, 30.0, 60.0]))
    cap.job("a", ["n1", "n2"])
    t = rnd.uniform(400, 700)
    if rnd.random() < 0.5:
        cap.xid(t, "n1", 3, rnd.choice([79, 48, 74])).crash(t + 1, "a", rank=3)
    else:
        cap.sel(t - 1, "n1", rnd.choice(["memory", "cpu"])).silence(t, "n1", until=t + 200).bmc_power(t + 20, "n1")
    for _ in range(rnd.randint(1, 3)):
        t += rnd.uniform(150, 400)
        cap.job("a", ["n1", "n2"], at=t)
        if rnd.random() < 0.5:
            cap.xid(t + 20, "n1", 3, 79)
        cap.crash(t + 25, "a", rank=3)
    return cap.lines()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.integers(0, 2**32 - 1).map(lineage_capture))
def test_restart_checkpoints_are_of_the_current_lineage(lines: list[str]) -> None:
    _, bad = gate_violations(lines)
    assert not bad, "\n".join(bad[:10])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.integers(0, 2**32 - 1).map(breach_capture))
def test_a_fence_the_scheduler_ignores_is_one_incident(lines: list[str]) -> None:
    out, bad = gate_violations(lines)
    bad += _fence_violations(out) + _other_violations(out)
    assert not bad, "\n".join(bad[:10])
