"""A generator of whole captures: hypothesis strategies for fleets, their work and what goes wrong.

A :class:`FleetPlan` is plain data (its ``repr`` is the Python that rebuilds it, so a shrunk counterexample is
kept as ``@example(FleetPlan(...))``); :func:`build` renders it with the project's own capture builder
(:mod:`builder`), so every line is worded the way its source writes it.

What a plan holds:

* a fleet of 2-64 nodes (:func:`fleets`; :func:`storm_fleets` for 1,024+), in racks of 4 or 8, each node's GPUs
  in two power domains (``<node>-PS1``/``-PS2``), agent heartbeats on every node and NVML on the nodes that run
  work;
* one to three jobs on consecutive nodes, whole nodes or halves of them (two jobs sharing a node by halves), of
  a fixed size or elastic in *nodes* of ``nproc_per_node`` workers -- an elastic job's rank 0 writes
  torchelastic's ``Starting elastic_operator with launch configs`` block (``min_nodes``, ``max_nodes``,
  ``nproc_per_node``), one line a record; steps every 1 s to 10 min, checkpoints by interval, under a shared
  or a node-local (``/mnt/nvme``) directory, a run that starts by loading a checkpoint;
* zero to four faults (:data:`KINDS`) at random moments: every root-cause category, second faults on other
  hardware, repeats on hardware already fenced, the scheduler putting a job back on fenced hardware,
  cancellations; any of them late (delivered after later lines) or sent twice; one source's clock skewed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from builder import Capture, _Obs
from hypothesis import strategies as st

__all__ = ["KINDS", "FaultPlan", "FleetPlan", "JobPlan", "build", "fleets", "launch_lines", "storm_fleets"]

# seconds between steps, 1 s to 10 min; drawn by index into a table of 100 where the fast ones are rare (every
# step is a line) and last (a shrink goes towards the cheap ones)
_USUAL = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 20.0, 45.0, 90.0, 180.0, 240.0, 15.0)
CADENCES: tuple[float, ...] = tuple(_USUAL[k % len(_USUAL)] for k in range(96)) + (5.0, 5.0, 2.0, 1.0)
INTERVALS = (300.0, None, 120.0, 600.0)  # checkpoint interval (None: the job does not checkpoint)
FATAL_XIDS = (79, 48, 74, 95, 119, 64)
SOFT_XIDS = (13, 31, 43)
KINDS = (
    "xid",  # a fatal XID on one of the job's GPUs, the rank on it crashes
    "xid_idle",  # a fatal XID on a GPU no job uses
    "xid_soft",  # an application XID (13/31/43) and a crash: software
    "sel",  # a BMC hardware SEL (memory, CPU, board) and the node goes silent
    "psu",  # a power-supply SEL and the GPUs of one power domain fall off the bus
    "node_down",  # in-band silence, the BMC says power on
    "rack",  # every node of a rack loses in-band and out-of-band
    "ecc",  # rising single-bit ECC (XID 92 and SBE counters)
    "dbe",  # a double-bit ECC counter
    "thermal",  # sustained temperature over the limit
    "zombie",  # one node's ranks stop: every other rank's collective timeout names them
    "nccl",  # one rank behind in a collective
    "oom",  # CUDA out of memory
    "exception",  # a Python exception, the job fails
    "ckpt_fail",  # a checkpoint write fails (no space)
    "ckpt_stale",  # checkpoints stop while training goes on
    "hang",  # steps stop, processes and nodes alive
    "spin",  # steps stop while every GPU spins at low power (corroborated hang)
    "nan",  # the loss turns NaN
    "second",  # a fatal XID, the crash, and a second fatal XID on other hardware of the job seconds later
    "repeat",  # a fatal XID that keeps being logged on the same (soon fenced, idle) GPU
    "breach",  # a fatal XID, then the scheduler restarts the job on the same hardware, which fails again
    "ckpt_crash",  # the node dies (memory SEL) during a checkpoint write, whose failure is reported
    "cancel",  # the job is cancelled
    "vanish",  # a GPU disappears from NVML without a kernel line; its rank crashes
    "kill",  # a rank is SIGKILLed with nothing said (exit -9, no error file); the others are torn down
)
SKEWED = ("kernel", "torchelastic", "framework", "bmc", "nvml", "trainer")


@dataclass(frozen=True)
class JobPlan:
    nodes: int = 1  # how many consecutive nodes it runs on
    half: bool = False  # uses half of each node's GPUs (two such jobs share their nodes)
    elastic: tuple[int, int] | None = None  # (min_nodes, max_nodes); None: fixed size
    every: float = 10.0  # step cadence
    interval: float | None = 300.0  # checkpoint interval
    local: bool = False  # checkpoints under a node-local directory
    resume: int | None = None  # the run starts by loading this step (a job that ran before the capture)


@dataclass(frozen=True)
class FaultPlan:
    kind: str = "xid"
    at: float = 0.5  # fraction of the capture's duration
    job: int = 0  # which job (modulo the number of jobs)
    pick: int = 0  # which rank / node / GPU (modulo what there is)
    code: int = 0  # which XID / SEL / error (modulo the list)
    late: float | None = None  # delivered this many seconds after it happened
    dup: bool = False  # sent twice


@dataclass(frozen=True)
class FleetPlan:
    nodes: int = 2
    gpus: int = 8
    rack: int = 4  # nodes per rack
    duration: float = 1200.0
    heartbeat: float = 15.0
    nvml: float = 60.0
    jobs: tuple[JobPlan, ...] = (JobPlan(),)
    faults: tuple[FaultPlan, ...] = ()
    skew: tuple[str, float] | None = None

    @property
    def names(self) -> list[str]:
        width = max(2, len(str(self.nodes)))
        return [f"n{k + 1:0{width}d}" for k in range(self.nodes)]


def launch_lines(min_nodes: int, max_nodes: int, nproc: int, job: str) -> list[str]:
    """The block torchelastic's launcher logs when it starts (torch/distributed/launcher/api.py)."""
    return [
        "[INFO] Starting elastic_operator with launch configs:",
        "  entrypoint       : train.py",
        f"  min_nodes        : {min_nodes}",
        f"  max_nodes        : {max_nodes}",
        f"  nproc_per_node   : {nproc}",
        f"  run_id           : {job}",
        "  rdzv_backend     : c10d",
        "  rdzv_endpoint    : head:29500",
        "  rdzv_configs     : {'timeout': 900}",
        "  max_restarts     : 0",
        "  monitor_interval : 5",
    ]


class FleetCapture(Capture):
    """The builder with NVML sampled only on ``nvml_nodes`` (a 64-node fleet stays a few thousand lines)."""

    nvml_nodes: set[str]
    elastic: dict[str, tuple[int, int] | None]

    def _background(self) -> list[_Obs]:
        every: float | None = self._nvml  # type: ignore[has-type]
        self._nvml = None
        try:
            out = super()._background()
        finally:
            self._nvml = every
        if every:
            for k, node in enumerate(sorted(self.nodes)):
                if node not in self.nvml_nodes:
                    continue
                for i in range(self.nodes[node]["gpus"]):
                    t = 2.0 + (k * 1.3 + i * 0.9) % every
                    while t < self.duration:
                        gone = self._gone.get((node, i))
                        if not self._is_silent(node, t) and (gone is None or t < gone):
                            out.append(_Obs(t, {"source": "nvml", "node": node, "gpu": self._gpu_ref(node, i),
                                                "metrics": self._metrics_at(node, i, t)}, 0, t))
                        t += every
        return out


def _place(plan: FleetPlan) -> list[tuple[str, dict[str, list[int]], JobPlan]]:
    """(name, allocation, plan) of every job: consecutive nodes; half-node jobs pair up on the same nodes."""
    names, g = plan.names, plan.gpus
    out: list[tuple[str, dict[str, list[int]], JobPlan]] = []
    cursor, open_half = 0, None  # open_half: (first node, count) of a half-node job whose other half is free
    for k, jp in enumerate(plan.jobs):
        count = max(1, min(jp.nodes, plan.nodes))
        if jp.half and open_half is not None and open_half[1] == count:
            first, gpus = open_half[0], list(range(g // 2, g))
            open_half = None
        else:
            if cursor + count > plan.nodes:
                break  # the fleet is full: the remaining jobs are not scheduled
            first, gpus = cursor, list(range(g // 2)) if jp.half else list(range(g))
            cursor += count
            open_half = (first, count) if jp.half else None
        out.append((f"job{k}", {names[first + i]: gpus for i in range(count)}, jp))
    return out


def build(plan: FleetPlan) -> Capture:
    """The capture ``plan`` describes (call ``.lines()`` on it). Faults happen in time order (the plan's order
    among those at the same moment): a fault sees the jobs as its earlier ones left them -- stopped by a crash,
    restarted by a breach -- and not as later ones will."""
    cap = FleetCapture(duration=plan.duration)
    cap.nvml_nodes, cap.elastic = set(), {}
    for k, name in enumerate(plan.names):
        cap.node(name, rack=f"r{k // plan.rack + 1}", gpus=plan.gpus)
    cap.heartbeats(plan.heartbeat).nvml(plan.nvml)
    placed = _place(plan)
    for name, alloc, jp in placed:
        cap.nvml_nodes |= set(alloc)
        nproc = len(next(iter(alloc.values())))
        elastic = None
        if jp.elastic is not None:
            lo, hi = sorted(jp.elastic)
            lo, hi = max(1, min(lo, len(alloc))), max(hi, len(alloc))
            elastic = (lo * nproc, hi * nproc)
        ckpt = f"/mnt/nvme/{name}" if jp.local else None
        cap.elastic[name] = elastic
        cap.job(name, alloc, at=10.0, elastic=elastic, interval=jp.interval, step_every=jp.every,
                ckpt_dir=ckpt, resume_step=jp.resume)
        if jp.elastic is not None and elastic is not None:
            for i, line in enumerate(launch_lines(elastic[0] // nproc, elastic[1] // nproc, nproc, name)):
                cap.framework(11.0 + 0.001 * i, name, 0, line)
    jobs = [(name, alloc) for name, alloc, _ in placed]
    for f in sorted(plan.faults, key=lambda f: f.at):  # in time order: each sees the fleet as it was at its moment
        if jobs:
            _fault(cap, plan, f, jobs)
            if f.late is not None:
                cap.late(f.late)
            if f.dup:
                cap.dup(5.0)
    if plan.skew is not None:
        cap.skew(*plan.skew)
    return cap


def _idle_gpu(cap: Capture, plan: FleetPlan, pick: int) -> tuple[str, int] | None:
    used = {(n, g) for j in cap.jobs.values() for n, gs, _ in j.alloc for g in gs}
    idle = [(n, g) for n in plan.names for g in range(plan.gpus) if (n, g) not in used]
    return idle[pick % len(idle)] if idle else None


def _running(cap: Capture, job: str, t: float) -> bool:
    """Whether a run of ``job`` is going at ``t``: only a running rank writes a checkpoint, or reports one failed."""
    return any(seg["start"] <= t and (seg["stop"] is None or t < seg["stop"]) for seg in cap.jobs[job].segments)


def _fault(cap: FleetCapture, plan: FleetPlan, f: FaultPlan, jobs: list[tuple[str, dict[str, list[int]]]]) -> None:
    job, alloc = jobs[f.job % len(jobs)]
    t = round(f.at * plan.duration, 3)
    ranks = cap.jobs[job].ranks
    rank = ranks[f.pick % len(ranks)]
    node, gpu = cap.jobs[job].place(rank)
    k = f.kind
    if k == "xid":
        cap.xid(t, node, gpu, FATAL_XIDS[f.code % len(FATAL_XIDS)]).crash(t + 1.5, job, rank)
    elif k == "xid_idle":
        where = _idle_gpu(cap, plan, f.pick) or (node, gpu)
        cap.xid(t, where[0], where[1], FATAL_XIDS[f.code % len(FATAL_XIDS)])
    elif k == "xid_soft":
        cap.xid(t, node, gpu, SOFT_XIDS[f.code % len(SOFT_XIDS)]).crash(t + 1.0, job, rank)
    elif k == "sel":
        cap.sel(t - 1, node, ("memory", "cpu", "board")[f.code % 3]).silence(t, node).bmc_power(t + 20, node)
    elif k == "psu":
        cap.sel(t, node, "psu")
        half = plan.gpus // 2
        lost = [g for g in range(plan.gpus) if (g >= half) == (gpu >= half)]
        for g in lost:
            cap.xid(t + 0.01, node, g, 79)
        lost_ranks = [r for r in ranks if cap.jobs[job].place(r)[0] == node and cap.jobs[job].place(r)[1] in lost]
        cap.crash(t + 2.0, job, lost_ranks[0] if lost_ranks else rank)
    elif k == "node_down":
        cap.silence(t, node).bmc_power(t + 20, node)
    elif k == "rack":
        rack = cap.nodes[node]["rack"]
        for n in sorted(cap.nodes):
            if cap.nodes[n]["rack"] == rack:
                cap.silence(t, n).bmc_unreachable(t + 10, n)
    elif k == "ecc":
        cap.xid(t, node, gpu, 92)
        for s in range(4):
            cap.metric(t + 60 * s, node, gpu, ecc_sbe_volatile=40 * (s + 1), ecc_sbe_aggregate=40 * (s + 1))
    elif k == "dbe":
        cap.metric(t, node, gpu, ecc_dbe_volatile=1 + f.code % 3)
    elif k == "thermal":  # held hot for 7 minutes, sampled each minute: sustained, so a running job is asked to save
        for s in range(8):
            if t + 60 * s < cap.duration:  # within the capture: no sample after every agent's last word
                cap.metric(t + 60 * s, node, gpu, temperature_c=93.0, clocks_event_reasons=["HW_THERMAL_SLOWDOWN"])
    elif k == "zombie":
        gone = [r for r in ranks if cap.jobs[job].place(r)[0] == node]
        if len(gone) < len(ranks):
            cap.stop_training(job, max(t - 600, 20.0))
            cap.nccl_timeout(t, job, missing=gone)
    elif k == "nccl" and len(ranks) > 1:
        cap.stop_training(job, max(t - 600, 20.0))
        cap.nccl_timeout(t, job, behind=[rank])
    elif k == "kill":
        cap.crash(t, job, rank, error=None, exitcode=-9)
    elif k == "oom":
        cap.cuda_oom(t, job, rank)
    elif k == "exception":
        cap.exception(t, job, rank).crash(t + 0.5, job, rank, error="ValueError: expected a batch of 16")
    elif k == "ckpt_fail":
        if _running(cap, job, t):  # a job an earlier fault stopped is writing nothing
            cap.checkpoint_failed(t, job, (cap.checkpoint_step(job, t) or 0) + 10)
    elif k == "ckpt_stale":
        cap.stop_checkpoints(job, t)
    elif k == "hang":
        cap.stop_training(job, t)
    elif k == "spin":
        cap.spin(t, job)
    elif k == "nan":
        cap.nan_loss(t, job)
    else:
        _compound(cap, plan, f, job, alloc, t, rank, node, gpu)


def _compound(cap: FleetCapture, plan: FleetPlan, f: FaultPlan, job: str, alloc: dict[str, list[int]], t: float,
              rank: int, node: str, gpu: int) -> None:
    """Faults of more than one observation over time: second faults, repeats, breaches, consequences."""
    k = f.kind
    code = FATAL_XIDS[f.code % len(FATAL_XIDS)]
    if k == "second":
        cap.xid(t, node, gpu, code).crash(t + 1.0, job, rank)
        others = [(n, g) for n, gs in alloc.items() for g in gs if n != node] or \
                 [(n, g) for n, gs in alloc.items() for g in gs if (n, g) != (node, gpu)]
        if others:
            n2, g2 = others[f.pick % len(others)]
            cap.xid(t + 18.0, n2, g2, (48, 79, 95)[f.code % 3])
    elif k == "repeat":
        cap.xid(t, node, gpu, code).crash(t + 1.5, job, rank)
        for s in range(1, 4):
            cap.xid(t + 120.0 * s, node, gpu, code)
    elif k == "breach":
        cap.xid(t, node, gpu, code).crash(t + 1.5, job, rank)
        again = t + 150.0
        if again + 30 < plan.duration:
            cap.job(job, alloc, at=again, elastic=cap.elastic.get(job), step_every=cap.jobs[job].segments[-1]["every"],
                    interval=cap.jobs[job].interval, ckpt_dir=cap.jobs[job].ckpt_dir)
            cap.crash(again + 25.0, job, rank)
    elif k == "ckpt_crash":
        step = (cap.checkpoint_step(job, t) or 0) + 10
        writing = _running(cap, job, t)  # a job an earlier fault stopped is writing nothing
        cap.sel(t - 0.5, node, "memory").silence(t, node).bmc_power(t + 20, node)
        if writing:
            cap.checkpoint_failed(t + 2.0, job, step, error="OSError: [Errno 5] Input/output error")
    elif k == "cancel":
        cap.scheduler(t, "job_cancelled", job=job)
    elif k == "vanish":
        cap.vanish(t, node, gpu).crash(t + 2.0, job, rank)


# --- strategies ------------------------------------------------------------------------------------------------
def _job(max_nodes: int) -> st.SearchStrategy[JobPlan]:
    span = st.integers(1, max(1, min(max_nodes, 4)))
    return st.builds(
        JobPlan, nodes=span, half=st.booleans(),
        elastic=st.none() | st.tuples(st.integers(1, 3), st.integers(1, 6)),
        every=st.integers(0, len(CADENCES) - 1).map(CADENCES.__getitem__), interval=st.sampled_from(INTERVALS), local=st.booleans(),
        resume=st.none() | st.integers(1, 4800).map(lambda s: s * 10))


def _faults(max_faults: int = 4) -> st.SearchStrategy[tuple[FaultPlan, ...]]:
    fault = st.builds(
        FaultPlan, kind=st.sampled_from(KINDS), at=st.floats(0.05, 0.8).map(lambda x: round(x, 3)),
        job=st.integers(0, 2), pick=st.integers(0, 63), code=st.integers(0, 5),
        late=st.none() | st.sampled_from([3.0, 30.0, 120.0]), dup=st.booleans())
    return st.lists(fault, max_size=max_faults).map(tuple)


@st.composite
def fleets(draw: Any, min_nodes: int = 2, max_nodes: int = 64,
           durations: tuple[float, ...] = (600.0, 600.0, 900.0), dense: bool = False) -> FleetPlan:
    """A fleet of ``min_nodes``..``max_nodes`` nodes (mostly small: the big ones are costly), its jobs and faults, over one
    of ``durations`` (seconds); ``dense``: heartbeats and NVML samples as often as real agents send them (the soak),
    else sparse ones (a minute, five minutes: the default run's captures stay a hundred-odd lines)."""
    nodes = draw(st.sampled_from([n for n in (2, 3, 4, 2, 3, 6, 8, 2, 4, 12, 16, 32, 64) if min_nodes <= n <= max_nodes]))
    gpus = draw(st.sampled_from([4, 4, 8]))
    jobs = tuple(draw(st.lists(_job(nodes), min_size=1, max_size=3)))
    return FleetPlan(
        nodes=nodes, gpus=gpus, rack=draw(st.sampled_from([4, 8])),
        duration=draw(st.sampled_from(durations)),
        heartbeat=draw(st.sampled_from(([60.0, 30.0, 15.0] if dense else [60.0]) if nodes <= 8 else [120.0])),
        nvml=draw(st.sampled_from([120.0, 60.0, 300.0] if dense else [300.0, 120.0, 300.0])), jobs=jobs, faults=draw(_faults()),
        skew=draw(st.none() | st.tuples(st.sampled_from(SKEWED), st.sampled_from([-20.0, 7.5, 45.0]))))


@st.composite
def storm_fleets(draw: Any) -> FleetPlan:
    """1,024+ nodes, a few jobs, sparse background (minutes between heartbeats), one or two faults."""
    return FleetPlan(
        nodes=draw(st.sampled_from([1024, 1280])), gpus=8, rack=draw(st.sampled_from([8, 16])), duration=900.0,
        heartbeat=300.0, nvml=120.0, jobs=tuple(draw(st.lists(_job(4), min_size=1, max_size=2))),
        faults=draw(_faults(2)), skew=None)
