"""A fleet's history: weeks of a large cluster's jobs, failures and restarts, as capture lines.

:class:`~faultline.simulate.Fleet` is one job and one fault, for the demo. This is what a backtest
and its benchmark need: hundreds of nodes for days, jobs of many sizes coming and going, the
scheduler restarting the ones that fail (off a node whose hardware failed), and failures of every
common kind, worded as their sources write them:

* hardware XIDs (79, 48, 94, 95, 74, 119) with the crash of the rank on that GPU;
* software crashes (a Python error on one rank), application XIDs (13) with their crash, CUDA OOMs,
  collective timeouts (the ranks of two nodes report the watchdog; one rank never arrives);
* a node going silent (its heartbeats stop for hours while its BMC says the power is on);
* **lemon** GPUs: a few cards on which the jobs that run there crash far more often than elsewhere,
  each crash a software crash on its own.

Background is the trainer's steps and checkpoints and the agents' heartbeats; NVML samples are
off by default (``sample_every_s``), as they are most of a real archive and expire after 30 days.
The same parameters and seed give the same lines.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from faultline.simulate import T0, _pci, _ts

__all__ = ["History"]

_XIDS = [79, 79, 48, 94, 95, 74, 119]
_XID_TEXT = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) has been detected.",
             94: "Contained: SM (0x1). RST: No, D-RST: No", 95: "Uncontained: LTC TAG (0x2,0x0). RST: Yes",
             74: "NVLink: fatal error detected on link 3", 119: "Timeout after 6s of waiting for RPC response "
             "from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL)", 13: "Graphics SM Warp Exception on "
             "(GPC 1, TPC 0, SM 0): Out Of Range Address"}
_FAULTS = ["xid", "software", "software", "xid13", "oom", "nccl", "node_down"]
Obs = tuple[float, dict[str, Any]]  # (seconds after T0, capture line without ts)


@dataclass
class _Run:
    job: str
    size: int
    nodes: list[int]
    start: float
    end: float
    fault: str | None = None  # what ended it early (None: it finished)
    gpu: int = 0  # the GPU (of nodes[0]) at fault
    step: int = 0  # the step it resumes from


@dataclass
class History:
    nodes: int = 500
    gpus_per_node: int = 8
    days: float = 7.0
    rack_size: int = 16
    seed: int = 20
    job_sizes: tuple[int, ...] = (1, 2, 4, 4, 8, 8, 16, 32)
    job_hours: tuple[float, float] = (4.0, 60.0)
    step_every_s: float = 300.0
    checkpoint_every_s: float = 3600.0
    heartbeat_every_s: float | None = 1800.0
    sample_every_s: float | None = None
    faults_per_node_day: float = 0.05
    lemons: int = 3
    lemon_crashes_per_day: float = 1.0
    restart_after_s: float = 900.0  # after the job's failure is reported (a timeout's 600 s later)
    _lemon_gpus: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def node_name(self, n: int) -> str:
        return f"node-{n + 1:04d}"

    def uuid(self, n: int, i: int) -> str:
        h = random.Random(f"{self.seed}/{n}/{i}").getrandbits(128)
        s = f"{h:032x}"
        return f"GPU-{s[:8]}-{s[8:12]}-{s[12:16]}-{s[16:20]}-{s[20:]}"

    @property
    def lemon_gpus(self) -> dict[str, int]:
        """The lemon cards: node name -> GPU index."""
        return {self.node_name(n): i for n, i in self._lemons().items()}

    def _lemons(self) -> dict[int, int]:
        if not self._lemon_gpus and self.lemons:
            rnd = random.Random(f"{self.seed}/lemons")
            self._lemon_gpus = {n: rnd.randrange(self.gpus_per_node)
                                for n in rnd.sample(range(self.nodes), min(self.lemons, self.nodes))}
        return self._lemon_gpus

    def lines(self) -> Iterator[str]:
        """Capture lines in time order (ties in the order generated)."""
        obs = sorted(self._observations(), key=lambda x: x[0])
        for t, data in obs:
            yield json.dumps({"ts": _ts(T0 + timedelta(seconds=t)), **data}, separators=(",", ":"))

    # --- the plan: which job ran where, when, and how it ended --------------------------------
    def runs(self) -> list[_Run]:
        rnd = random.Random(self.seed)
        horizon = self.days * 86400
        free = set(range(self.nodes))
        down: dict[int, float] = {}
        queue: list[tuple[str, int, float, int]] = []  # waiting: job, size, seconds left, step
        ends: list[tuple[float, int, _Run]] = []
        out: list[_Run] = []
        count = 0

        def start(job: str, size: int, left: float, step: int, t: float, avoid: set[int]) -> bool:
            usable = sorted(free - avoid)
            if len(usable) < size:
                return False
            nodes = rnd.sample(usable, size)
            run = _Run(job, size, nodes, t, min(horizon, t + left), step=step)
            self._fault(rnd, run)
            free.difference_update(nodes)
            out.append(run)
            heapq.heappush(ends, (run.end, len(out), run))
            return True

        def fill(t: float) -> None:
            nonlocal count
            for waiting in list(queue):
                if start(*waiting, t, set()):
                    queue.remove(waiting)
            while True:
                size = rnd.choice(self.job_sizes)
                hours = rnd.uniform(*self.job_hours)
                if not start(f"job-{count:05d}", size, hours * 3600, 0, t, set()):
                    return
                count += 1

        fill(0.0)
        while ends:
            t, _, run = heapq.heappop(ends)
            if t >= horizon:
                break
            for n, back in list(down.items()):
                if back <= t:
                    free.add(n)
                    del down[n]
            broken = {run.nodes[0]} if run.fault in ("xid", "node_down") else set()
            for n in run.nodes:
                if n in broken:
                    down[n] = t + 12 * 3600  # repaired half a day later
                else:
                    free.add(n)
            if run.fault is not None:
                step = int((t - run.start) // self.checkpoint_every_s * self.checkpoint_every_s
                           // self.step_every_s) * 10 + run.step
                left = run.end - t if run.end > t else 3600.0
                if not start(run.job, run.size, left, step, t + self.restart_after_s, broken):
                    queue.append((run.job, run.size, left, step))
            fill(t)
        return out

    def _fault(self, rnd: random.Random, run: _Run) -> None:
        """Maybe end ``run`` early: the fleet's fault rate over its nodes, and the lemons among them."""
        hours = (run.end - run.start) / 3600
        rate = self.faults_per_node_day / 24 * run.size
        at = run.start + rnd.expovariate(rate) * 3600 if rate > 0 else float("inf")
        kind = rnd.choice(_FAULTS)
        lemon = [(n, g) for n, g in self._lemons().items() if n in run.nodes]
        if lemon and self.lemon_crashes_per_day > 0:
            lemon_at = run.start + rnd.expovariate(self.lemon_crashes_per_day / 24) * 3600
            if lemon_at < at:
                at, kind = lemon_at, "lemon"
        if at - run.start < min(hours * 3600, 600) or at >= run.end:
            return
        run.end, run.fault = at, kind
        if kind == "lemon":
            n, g = lemon[0]
            run.nodes.remove(n)
            run.nodes.insert(0, n)  # the faulting node first: rank placement follows
            run.gpu = g
        else:
            run.gpu = rnd.randrange(self.gpus_per_node)

    # --- the lines -------------------------------------------------------------------------
    def _observations(self) -> Iterator[Obs]:
        for n in range(self.nodes):
            yield 0.0, {"source": "inventory", "node": self.node_name(n), "rack": f"r{n // self.rack_size + 1:03d}",
                        "gpus": [{"index": i, "uuid": self.uuid(n, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0",
                                  "name": "NVIDIA H100 80GB HBM3",
                                  "power_domain": f"psu-{'A' if i < self.gpus_per_node // 2 else 'B'}"}
                                 for i in range(self.gpus_per_node)]}
        runs = self.runs()
        silent = {(r.nodes[0], r.end) for r in runs if r.fault == "node_down"}
        yield from self._background(silent)
        rnd = random.Random(f"{self.seed}/lines")
        for run in runs:
            yield from self._run_lines(rnd, run)

    def _background(self, silent: set[tuple[int, float]]) -> Iterator[Obs]:
        rnd = random.Random(f"{self.seed}/background")
        horizon = self.days * 86400
        quiet = {n: [(t, t + 6 * 3600) for m, t in silent if m == n] for n, _ in silent}
        for n in range(self.nodes):
            node = self.node_name(n)
            gaps = quiet.get(n, [])
            for every, what in ((self.heartbeat_every_s, "hb"), (self.sample_every_s, "nvml")):
                if not every:
                    continue
                t = rnd.uniform(0, every)
                while t < horizon:
                    if not any(a <= t < b for a, b in gaps):
                        if what == "hb":
                            yield t, {"source": "node_agent", "node": node, "alive": True}
                        else:
                            yield from self._samples(rnd, t, n)
                    t += every
            for a, _ in gaps:
                yield a + 60, {"source": "bmc", "node": node, "power": "on"}

    def _samples(self, rnd: random.Random, t: float, n: int) -> Iterator[Obs]:
        for i in range(self.gpus_per_node):
            yield t + i * 0.01, {"source": "nvml", "node": self.node_name(n), "gpu": {
                "index": i, "uuid": self.uuid(n, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0"},
                "metrics": {"temperature_c": round(rnd.gauss(62, 3), 1), "power_w": round(rnd.gauss(520, 30)),
                            "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "remapped_rows_pending": 0}}

    def _run_lines(self, rnd: random.Random, run: _Run) -> Iterator[Obs]:
        g = self.gpus_per_node
        nodes = [self.node_name(n) for n in run.nodes]
        yield run.start, {"source": "scheduler", "event": "job_started", "job": run.job, "allocation": [
            {"node": node, "gpus": list(range(g)), "ranks": list(range(k * g, (k + 1) * g))}
            for k, node in enumerate(nodes)], "world_size": run.size * g,
            "elastic": {"min_gpus": run.size * g, "max_gpus": run.size * g},
            "checkpoint": {"dir": f"/ckpt/{run.job}", "interval_s": self.checkpoint_every_s},
            "gpu_class": "H100-80GB", "owner": "ml-team", "max_restarts": 20}
        trainer = {"source": "trainer", "job": run.job, "rank": 0, "node": nodes[0]}
        if run.step:
            yield run.start + 30, {**trainer, "event": "checkpoint_loaded", "step": run.step,
                                   "path": f"/ckpt/{run.job}/step_{run.step:08d}"}
        step, t, last_ck = run.step, run.start + 60, run.start
        while t < run.end:
            step += 10
            yield t, {**trainer, "event": "step", "step": step, "loss": round(2.5 * 0.9999 ** step + 0.3, 5),
                      "samples_per_s": round(rnd.gauss(430, 4), 1)}
            if t - last_ck >= self.checkpoint_every_s:
                last_ck = t
                yield t + 8, {**trainer, "event": "checkpoint_saved", "step": step,
                              "path": f"/ckpt/{run.job}/step_{step:08d}", "bytes": 14_000_000_000, "seconds": 8.0}
            t += self.step_every_s
        if run.fault is None:
            yield run.end, {"source": "scheduler", "event": "job_finished", "job": run.job}
        else:
            yield from self._failure(run, nodes)

    def _failure(self, run: _Run, nodes: list[str]) -> Iterator[Obs]:
        t, node, gpu, job = run.end, nodes[0], run.gpu, run.job
        rank = gpu  # the faulting node is the allocation's first: rank i is its GPU i
        kind = run.fault
        code = 13 if kind == "xid13" else random.Random(f"{job}/{t}").choice(_XIDS) if kind == "xid" else None
        if code is not None:
            yield t, {"source": "kernel", "node": node, "line": f"NVRM: Xid (PCI:0000:{_pci(gpu).lower()}:00): "
                      f"{code}, pid='<unknown>', name=<unknown>, {_XID_TEXT[code]}"}
        if kind == "node_down":
            yield t + 90, {"source": "scheduler", "event": "job_failed", "job": job}
            return
        if kind == "nccl":
            yield from self._watchdogs(t, run, nodes, rank)
            yield t + 605, {"source": "scheduler", "event": "job_failed", "job": job}
            return
        error = {"oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                 "software": "ValueError: expected a batch of 16, got 15",
                 "lemon": "RuntimeError: CUDA error: an illegal memory access was encountered"}.get(
            kind or "", "RuntimeError: CUDA error: unspecified launch failure")
        yield t + 1.5, {"source": "torchelastic", "job": job, "node": node, "rank": rank, "exitcode": 1,
                        "error_file": {"message": {"message": error, "extraInfo": {"py_callstack": "Traceback",
                                                                                   "timestamp": "0"}}}}
        yield t + 5, {"source": "scheduler", "event": "job_failed", "job": job}

    def _watchdogs(self, t: float, run: _Run, nodes: list[str], missing: int) -> Iterator[Obs]:
        """The ranks of the first two nodes report the watchdog; ``missing`` never does."""
        g = self.gpus_per_node
        for k, node in enumerate(nodes[:2]):
            for i in range(g):
                r = k * g + i
                if r != missing:
                    yield t + 600 + r * 0.001, {
                        "source": "framework", "job": run.job, "node": node, "rank": r, "local_rank": i,
                        "line": f"[rank{r}]:[E] ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
                                "operation timeout: WorkNCCL(SeqNum=900, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                                "Timeout(ms)=600000) ran for 600100 milliseconds before timing out."}
