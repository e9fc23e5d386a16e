"""A small fluent builder of captures (contract §1) for the correlator's decision tests.

Times are seconds after :data:`T0`. Describe the fleet (``node``), the work
(``job``: the scheduler line, plus the trainer's steps and checkpoints until
the job stops), the background traffic (``heartbeats``, ``nvml``), then inject
faults worded the way each source really writes them. ``lines()`` renders the
capture: background traffic is generated then, so a node silenced later stops
sending heartbeats, a GPU fallen off the bus disappears from NVML, and a job
that failed stops stepping.

Arrival order is event time unless a line is made ``late`` (it arrives after
lines that happened later), duplicated (``dup``: sent again), or its source's
clock is ``skew``-ed (the ``ts`` it writes is off; the order it arrives in is not).

    cap = (Capture(duration=1500).node("n1").node("n2")
           .job("pt", ["n1", "n2"]).heartbeats().nvml())
    cap.xid(600, "n1", 3, 79).crash(601.5, "pt", rank=3)
    lines = cap.lines()
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["T0", "Capture", "at_iso"]

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
_PCI_BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
_MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()

# code -> (process fields, description), as R535..R570 drivers write them
XID_TEXT: dict[int, tuple[str, str]] = {
    13: ("pid=1234, name=python, ", "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address"),
    31: ("pid=2345, name=python, ", "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
         "faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"),
    43: ("pid=3456, name=python, ", "Ch 00000008"),
    45: ("pid=3456, name=python, ", "Ch 00000010"),
    48: ("pid='<unknown>', name=<unknown>, ", "An uncorrectable double bit error (DBE) has been detected on GPU "
         "in the framebuffer at partition 6, subpartition 0."),
    63: ("pid='<unknown>', name=<unknown>, ", "Row Remapper: New row (0x00000000000abc12) marked for remapping, "
         "reset gpu to activate."),
    64: ("pid='<unknown>', name=<unknown>, ", "Row Remapper Error: All reserved rows for bank are remapped"),
    74: ("pid='<unknown>', name=<unknown>, ", "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, "
         "0x0, 0x0, 0x0)"),
    79: ("pid='<unknown>', name=<unknown>, ", "GPU has fallen off the bus."),
    92: ("pid='<unknown>', name=<unknown>, ", "High single-bit ECC error rate detected"),
    94: ("pid=4567, name=python, ", "Contained: SM (0x1). RST: No, D-RST: No"),
    95: ("pid=4567, name=python, ", "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No"),
    119: ("pid='<unknown>', name=<unknown>, ", "Timeout after 6s of waiting for RPC response from GPU1 GSP! "
          "Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x410)."),
    120: ("pid='<unknown>', name=<unknown>, ", "GSP task 2 reported an error: 0x7a (unrecoverable)"),
}

SEL_TEXT: dict[str, tuple[str, str]] = {
    "psu": ("Power Supply PS2", "Failure detected"),
    "psu_ac": ("Power Supply PS1", "Power Supply AC lost"),
    "memory": ("Memory DIMM_B3", "Uncorrectable ECC"),
    "cpu": ("Processor CPU1", "IERR"),
    "board": ("Critical Interrupt PCIe_Slot4", "Bus Fatal Error"),
    "memory_ce": ("Memory DIMM_A1", "Correctable ECC"),
    "log_cleared": ("Event Logging Disabled SEL", "Log area reset/cleared"),
}


def at_iso(t: float) -> str:
    """RFC 3339 of ``T0 + t`` seconds, the form the captures use."""
    return (T0 + timedelta(seconds=t)).isoformat(timespec="milliseconds")


@dataclass
class _Obs:
    t: float  # true event time
    data: dict[str, Any]
    seq: int
    arrive: float  # when it reaches the pipeline (ordering key)
    copies: list[float] = field(default_factory=list)  # arrival times of re-sent copies


@dataclass
class _Job:
    name: str
    alloc: list[tuple[str, list[int], list[int]]]  # (node, gpus, ranks)
    interval: float | None
    ckpt_dir: str
    segments: list[dict[str, Any]] = field(default_factory=list)
    _at: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # rank -> (node, GPU, local rank)

    def place(self, rank: int) -> tuple[str, int]:
        return self.where(rank)[:2]

    def where(self, rank: int) -> tuple[str, int, int]:
        """(node, GPU, local rank) of ``rank``, from an index built once (a 16,384-rank job stays quick)."""
        if not self._at:
            self._at = {r: (node, g, k) for node, gpus, ranks in self.alloc
                        for k, (g, r) in enumerate(zip(gpus, ranks, strict=True))}
        if rank not in self._at:
            raise KeyError(f"rank {rank} not in job {self.name}")
        return self._at[rank]

    @property
    def ranks(self) -> list[int]:
        return [r for _, _, rs in self.alloc for r in rs]


class Capture:
    """A capture under construction; every method returns ``self``."""

    def __init__(self, duration: float = 1800.0) -> None:
        self.duration = duration
        self._obs: list[_Obs] = []
        self._last: list[_Obs] = []
        self._seq = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, _Job] = {}
        self._silent: dict[str, list[tuple[float, float]]] = {}
        self._gone: dict[tuple[str, int], float] = {}
        self._metrics: list[tuple[float, str, int, dict[str, Any]]] = []
        self._skew: dict[str, float] = {}
        self._hb: tuple[float, list[str] | None] | None = None
        self._nvml: float | None = None
        self._raw: list[tuple[float, str]] = []
        self._bmc_every: float | None = None
        self._bmc_dead: dict[str, float] = {}
        self._bmc_quiet: set[str] = set()

    # --- plumbing ---------------------------------------------------------------------
    def _add(self, t: float, source: str, **data: Any) -> _Obs:
        self._seq += 1
        o = _Obs(t, {"source": source, **data}, self._seq, t)
        self._obs.append(o)
        return o

    def _inject(self, obs: Iterable[_Obs]) -> Capture:
        self._last = list(obs)
        return self

    def gpu_uuid(self, node: str, i: int) -> str:
        h = hashlib.sha256(f"{node}/{i}".encode()).hexdigest()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    @staticmethod
    def nvml_pci(i: int) -> str:
        bus = _PCI_BUSES[i] if i < len(_PCI_BUSES) else f"{0xC0 + i:02X}"
        return f"00000000:{bus}:00.0"

    @staticmethod
    def kernel_pci(i: int) -> str:
        bus = _PCI_BUSES[i] if i < len(_PCI_BUSES) else f"{0xC0 + i:02X}"
        return f"PCI:0000:{bus.lower()}:00"

    def _gpu_ref(self, node: str, i: int) -> dict[str, Any]:
        return {"index": i, "uuid": self.gpu_uuid(node, i), "pci_bus_id": self.nvml_pci(i)}

    # --- fleet and work -------------------------------------------------------------------
    def node(self, name: str, rack: str = "r1", gpus: int = 8, domains: int = 2, at: float = 0.0) -> Capture:
        """A node with ``gpus`` GPUs; GPUs are spread over ``domains`` power supplies in halves."""
        self.nodes[name] = {"rack": rack, "gpus": gpus}
        self._add(at, "inventory", node=name, rack=rack, gpus=[
            {**self._gpu_ref(name, i), "name": "NVIDIA H100 80GB HBM3",
             "power_domain": f"{name}-PS{1 + i * domains // gpus}"} for i in range(gpus)])
        return self

    def job(self, name: str, alloc: list[str] | dict[str, list[int]], at: float = 10.0,
            elastic: tuple[int, int] | None = None, interval: float | None = 600.0, max_restarts: int | None = 3,
            owner: str = "ml-team", train: bool = True, step_every: float = 10.0, ckpt_dir: str | None = None,
            resume_step: int | None = None, gpu_class: str = "H100-80GB", announce_load: bool = True,
            save_s: float = 4.0) -> Capture:
        """``job_started`` (again for a restart: training resumes from the newest checkpoint, or from
        ``resume_step`` -- an owner's rollback; ``announce_load``: the trainer logs ``checkpoint_loaded``);
        checkpoints go to ``ckpt_dir`` (default /mnt/ckpt/<name>) and take ``save_s`` (steps wait for them)."""
        spec = alloc if isinstance(alloc, dict) else {n: list(range(self.nodes[n]["gpus"])) for n in alloc}
        rows, rank = [], 0
        for node, gpus in spec.items():
            rows.append((node, list(gpus), list(range(rank, rank + len(gpus)))))
            rank += len(gpus)
        world = rank
        lo, hi = elastic or (world, world)
        j = _Job(name, rows, interval, ckpt_dir or f"/mnt/ckpt/{name}")
        prev = self.jobs.get(name)
        if prev is not None:
            j.segments = prev.segments
            for seg in j.segments:
                seg["stop"] = at if seg["stop"] is None else min(seg["stop"], at)
        self.jobs[name] = j
        body: dict[str, Any] = {
            "event": "job_started", "job": name,
            "allocation": [{"node": n, "gpus": g, "ranks": r} for n, g, r in rows],
            "world_size": world, "elastic": {"min_gpus": lo, "max_gpus": hi},
            "checkpoint": {"dir": j.ckpt_dir, "interval_s": interval} if interval else None,
            "gpu_class": gpu_class, "owner": owner, "max_restarts": max_restarts,
        }
        o = self._add(at, "scheduler", **{k: v for k, v in body.items() if v is not None})
        if train:
            resume = self.checkpoint_before(name, at) if prev is not None else None
            if resume_step is not None:
                resume = (at, resume_step)
            j.segments.append({"start": at, "stop": None, "every": step_every, "resume": resume,
                               "node": rows[0][0], "interval": interval, "nan_at": None, "save_s": save_s,
                               "announce": announce_load})
        return self._inject([o])

    def stop_training(self, job: str, at: float) -> Capture:
        for seg in self.jobs[job].segments:
            if seg["stop"] is None or seg["stop"] > at:
                seg["stop"] = at
        return self

    def heartbeats(self, every: float = 15.0, nodes: list[str] | None = None) -> Capture:
        self._hb = (every, nodes)
        return self

    def nvml(self, every: float | None = 30.0) -> Capture:
        self._nvml = every
        return self

    # --- what the trainer reported ---------------------------------------------------------
    def _steps(self, j: _Job, seg: dict[str, Any]) -> list[tuple[float, dict[str, Any]]]:
        out: list[tuple[float, dict[str, Any]]] = []
        stop = self.duration if seg["stop"] is None else seg["stop"]
        step = seg["resume"][1] if seg["resume"] else 0
        t = seg["start"] + seg["every"]
        if seg["resume"]:
            if seg.get("announce", True):
                out.append((seg["start"] + 5, {"event": "checkpoint_loaded", "step": step,
                                               "path": f"{j.ckpt_dir}/step_{step:07d}"}))
            t += 10
        last_ck = seg["start"]
        while t < stop:
            step += 10
            loss = 2.4 * math.exp(-step / 20000) + 0.3
            if seg.get("flat_at") is not None and t >= seg["flat_at"]:
                loss = seg["flat_loss"] + 0.002 * math.sin(step / 30)
            if seg["nan_at"] is not None and t >= seg["nan_at"]:
                loss = float("nan")
            tp = (430.0 + 3 * math.sin(step / 70)) * self._speed(seg, t)
            out.append((t, {"event": "step", "step": step, "loss": round(loss, 5) if math.isfinite(loss) else loss,
                            "samples_per_s": round(tp, 1)}))
            save = seg.get("save_s", 4.0)
            # a write the run's end interrupts is never reported saved: its rank is gone before it completes
            if seg["interval"] and t - last_ck >= seg["interval"] - 1e-6 and not seg.get("no_ckpt_after", 1e18) <= t \
                    and t + save <= stop:
                last_ck = t
                out.append((t + save, {"event": "checkpoint_saved", "step": step,
                                       "path": f"{j.ckpt_dir}/step_{step:07d}", "bytes": 14_000_000_000,
                                       "seconds": save}))
                t += max(0.0, save - 4.0)  # a save longer than the usual pause holds the next step back
            t += seg["every"]
        return out

    @staticmethod
    def _speed(seg: dict[str, Any], t: float) -> float:
        factor = 1.0
        for at, f in sorted(seg.get("speed", [])):
            if at <= t:
                factor = f
        return factor

    def slow(self, at: float, job: str, factor: float) -> Capture:
        """From ``at`` on, the job's current run steps at ``factor`` of its usual throughput (samples/s)."""
        for seg in self.jobs[job].segments:
            if seg["stop"] is None or seg["stop"] > at:
                seg.setdefault("speed", []).append((at, factor))
        return self

    def checkpoint_before(self, job: str, t: float) -> tuple[float, int] | None:
        """(time, step) of the newest checkpoint saved before ``t``, or None."""
        best = None
        for seg in self.jobs[job].segments:
            for ts, d in self._steps(self.jobs[job], seg):
                if d["event"] == "checkpoint_saved" and ts < t and (best is None or ts >= best[0]):
                    best = (ts, d["step"])
        return best

    def checkpoint_step(self, job: str, t: float) -> int | None:
        ck = self.checkpoint_before(job, t)
        return ck[1] if ck else None

    def nan_loss(self, at: float, job: str) -> Capture:
        """The loss turns NaN from ``at`` on (written as Python's json writes it)."""
        for seg in self.jobs[job].segments:
            if seg["stop"] is None:
                seg["nan_at"] = at
        return self

    def flat_loss(self, at: float, job: str, value: float = 1.9) -> Capture:
        """The loss stops improving from ``at`` on (it wobbles around ``value``)."""
        for seg in self.jobs[job].segments:
            if seg["stop"] is None:
                seg["flat_at"], seg["flat_loss"] = at, value
        return self

    def stop_checkpoints(self, job: str, at: float) -> Capture:
        """Training goes on but no checkpoint is saved after ``at``."""
        for seg in self.jobs[job].segments:
            seg["no_ckpt_after"] = at
        return self

    def trainer(self, at: float, job: str, event: str, **fields: Any) -> Capture:
        node = self.jobs[job].alloc[0][0]
        return self._inject([self._add(at, "trainer", job=job, rank=0, node=node, event=event, **fields)])

    def checkpoint_failed(self, at: float, job: str, step: int,
                          error: str = "OSError: [Errno 28] No space left on device") -> Capture:
        j = self.jobs[job]
        path = f"{j.ckpt_dir}/step_{step:07d}"
        return self.trainer(at, job, "checkpoint_failed", step=step, path=path,
                            error=f"{error}: '{path}/model.safetensors'")

    def checkpoint_loaded(self, at: float, job: str, step: int) -> Capture:
        return self.trainer(at, job, "checkpoint_loaded", step=step,
                            path=f"{self.jobs[job].ckpt_dir}/step_{step:07d}")

    # --- kernel, NVML ------------------------------------------------------------------------
    def xid(self, at: float, node: str, gpu: int, code: int, text: str | None = None,
            prefix: str = "") -> Capture:
        """An NVRM XID line; ``prefix``: '' (kmsg message), 'syslog', 'dmesg' or 'kmsg'."""
        fields, desc = XID_TEXT.get(code, ("pid='<unknown>', name=<unknown>, ", "Unknown error"))
        msg = f"NVRM: Xid ({self.kernel_pci(gpu)}): {code}, {fields}{text or desc}"
        o = self._add(at, "kernel", node=node, line=self._kernel_prefix(at, node, prefix) + msg)
        if code == 79:
            self._fall_off(node, gpu, at)
        return self._inject([o])

    def kernel(self, at: float, node: str, message: str, prefix: str = "") -> Capture:
        return self._inject([self._add(at, "kernel", node=node,
                                       line=self._kernel_prefix(at, node, prefix) + message)])

    @staticmethod
    def _kernel_prefix(at: float, node: str, prefix: str) -> str:
        t = T0 + timedelta(seconds=at)
        if prefix == "syslog":
            return f"{_MONTHS[t.month - 1]} {t.day:2d} {t:%H:%M:%S} {node} kernel: "
        if prefix == "dmesg":
            return f"[{86400 + at:12.6f}] "
        if prefix == "kmsg":
            return f"4,{int(at * 10) + 1000},{int((86400 + at) * 1e6)},-;"
        return ""

    def vanish(self, at: float, node: str, gpu: int) -> Capture:
        """The GPU stops appearing in NVML from ``at`` (off the bus, and no kernel line says so)."""
        return self._fall_off(node, gpu, at)

    def _fall_off(self, node: str, gpu: int, at: float) -> Capture:
        """The GPU is gone from NVML from ``at``, or from when it first fell off: a GPU off the bus stays off
        (a second XID 79 on it does not bring back the samples between the two)."""
        self._gone[(node, gpu)] = min(at, self._gone.get((node, gpu), at))
        return self

    def spin(self, at: float, job: str, util: float = 100.0, power: float = 140.0) -> Capture:
        """The job's steps stop at ``at`` while every GPU of it stays busy at low power (ranks spinning in a
        collective): its NVML readings change from ``at`` on."""
        self.stop_training(job, at)
        for node, gpus, _ in self.jobs[job].alloc:
            for g in gpus:
                self._metrics.append((at, node, g, {"utilization_pct": util, "power_w": power}))
        return self

    def bmc_polls(self, every: float = 60.0) -> Capture:
        """Every node's BMC is polled every ``every`` s: power on, or a failed poll once ``bmc_down``."""
        self._bmc_every = every
        return self

    def bmc_down(self, at: float, node: str, quiet: bool = False) -> Capture:
        """The node's BMC stops answering its polls from ``at``: each poll reports it unreachable, or (``quiet``)
        nothing is reported for it at all (its poller lost it)."""
        self._bmc_dead[node] = at
        if quiet:
            self._bmc_quiet.add(node)
        return self

    def metric(self, at: float, node: str, gpu: int, **metrics: Any) -> Capture:
        """NVML readings change from ``at`` on (counters stay); one sample is sent at ``at``."""
        self._metrics.append((at, node, gpu, metrics))
        return self._inject([self._add(at, "nvml", node=node, gpu=self._gpu_ref(node, gpu),
                                       metrics=self._metrics_at(node, gpu, at))])

    def _metrics_at(self, node: str, gpu: int, t: float) -> dict[str, Any]:
        busy = any(n == node and gpu in g for j in self.jobs.values() for n, g, _ in j.alloc)
        m: dict[str, Any] = {
            "temperature_c": 58.0 + gpu * 0.7, "power_w": 520.0 if busy else 70.0, "power_limit_w": 700.0,
            "utilization_pct": 97 if busy else 0, "memory_used_mib": 64000 if busy else 0,
            "memory_total_mib": 81559, "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0,
            "ecc_sbe_aggregate": 0, "ecc_dbe_aggregate": 0, "remapped_rows_pending": False,
            "remapped_rows_failure": False, "clocks_event_reasons": [],
        }
        for at, n, g, changes in sorted(self._metrics, key=lambda x: x[0]):
            if n == node and g == gpu and at <= t:
                m.update(changes)
        return m

    # --- training processes -------------------------------------------------------------------
    def framework(self, at: float, job: str, rank: int, line: str) -> Capture:
        node, _, local = self.jobs[job].where(rank)
        return self._inject([self._add(at, "framework", job=job, node=node, rank=rank, local_rank=local,
                                       line=line)])

    def nccl_timeout(self, at: float, job: str, seq: int = 842, missing: Iterable[int] = (),
                     behind: Iterable[int] = (), timeout_ms: int = 600000,
                     only: Iterable[int] | None = None) -> Capture:
        """Every rank (or those in ``only``) but ``missing`` reports the watchdog timeout and its last
        enqueued/completed work; the ``behind`` ranks never enqueued ``seq`` (they time out one earlier)."""
        gone, late = set(missing), set(behind)
        ranks = self.jobs[job].ranks if only is None else sorted(only)
        obs: list[_Obs] = []
        for k, r in enumerate(r for r in ranks if r not in gone):
            s = seq - 1 if r in late else seq
            t = at + 0.01 * k
            stamp = (T0 + timedelta(seconds=t)).strftime("%m%d %H:%M:%S.%f")
            head = f"[rank{r}]:[E{stamp} {4000 + r} ProcessGroupNCCL.cpp"
            self.framework(t, job, r, f"{head}:632] [Rank {r}] Watchdog caught collective operation timeout: "
                           f"WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn=268435456, NumelOut=268435456, "
                           f"Timeout(ms)={timeout_ms}) ran for {timeout_ms + 100 + r} milliseconds before timing out.")
            obs += self._last
            self.framework(t + 0.001, job, r, f"{head}:2317] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Timeout at "
                           f"NCCL work: {s}, last enqueued NCCL work: {s}, last completed NCCL work: {s - 1}.")
            obs += self._last
        return self._inject(obs)

    @staticmethod
    def error_file(error: str, form: str = "record") -> Any:
        """The error file as torchelastic's @record writes it ('record'), a plain string, or None."""
        if form == "plain":
            return error
        tb = f"Traceback (most recent call last):\n  File \"train.py\", line 211, in <module>\n    main()\n{error}\n"
        return {"message": {"message": error, "extraInfo": {"py_callstack": tb, "timestamp": "1776828201"}}}

    def worker_exit(self, at: float, job: str, rank: int, exitcode: int, error: str | None = None,
                    form: str = "record") -> Capture:
        node, _ = self.jobs[job].place(rank)
        ef = self.error_file(error, form) if error is not None else None
        return self._inject([self._add(at, "torchelastic", job=job, node=node, rank=rank, exitcode=exitcode,
                                       error_file=ef)])

    def crash(self, at: float, job: str, rank: int, error: str | None = "RuntimeError: CUDA error: unknown error",
              exitcode: int = 1, others: int = -15, fail_after: float = 3.0, form: str = "record") -> Capture:
        """One rank dies (exit code and error file), torchelastic tears the others down, the job fails."""
        obs: list[_Obs] = []
        self.worker_exit(at, job, rank, exitcode, error, form)
        obs += self._last
        for r in self.jobs[job].ranks:
            if r != rank:
                self.worker_exit(at + 1, job, r, others)
                obs += self._last
        self.scheduler(at + fail_after, "job_failed", job=job)
        obs += self._last
        self.stop_training(job, at)
        return self._inject(obs)

    def cuda_oom(self, at: float, job: str, rank: int) -> Capture:
        gpu = self.jobs[job].place(rank)[1]
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu} has a total "
               "capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has "
               "78.04 GiB memory in use.")
        self.framework(at, job, rank, f"[rank{rank}]: {msg}")
        first = self._last
        self.crash(at + 0.4, job, rank, msg)
        return self._inject(first + self._last)

    def cuda_error(self, at: float, job: str, rank: int, error: str = "an illegal memory access was encountered"
                   ) -> Capture:
        """The CUDA error lines PyTorch writes on the rank's output."""
        obs: list[_Obs] = []
        for k, line in enumerate([f"RuntimeError: CUDA error: {error}",
                                  "CUDA kernel errors might be asynchronously reported at some other API call, so "
                                  "the stacktrace below might be incorrect.",
                                  "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]):
            self.framework(at + 0.001 * k, job, rank, f"[rank{rank}]: {line}")
            obs += self._last
        return self._inject(obs)

    def exception(self, at: float, job: str, rank: int, error: str = "ValueError: expected a batch of 16") -> Capture:
        """A Python traceback on the rank's output, one line per record."""
        obs: list[_Obs] = []
        for k, line in enumerate(["Traceback (most recent call last):",
                                  '  File "/workspace/train.py", line 211, in <module>', "    main()", error]):
            self.framework(at + 0.001 * k, job, rank, f"[rank{rank}]: {line}")
            obs += self._last
        return self._inject(obs)

    # --- scheduler, BMC, node agent ----------------------------------------------------------------
    def scheduler(self, at: float, event: str, job: str | None = None, node: str | None = None) -> Capture:
        data = {"event": event, **({"job": job} if job else {}), **({"node": node} if node else {})}
        if job and event in ("job_failed", "job_finished", "job_cancelled"):
            self.stop_training(job, at)
        return self._inject([self._add(at, "scheduler", **data)])

    def bmc_power(self, at: float, node: str, on: bool = True) -> Capture:
        return self._inject([self._add(at, "bmc", node=node, power="on" if on else "off")])

    def bmc_unreachable(self, at: float, node: str) -> Capture:
        return self._inject([self._add(at, "bmc", node=node, reachable=False)])

    def sel(self, at: float, node: str, kind: str = "psu", asserted: bool = True, rec: int = 0x1A) -> Capture:
        """One `ipmitool sel elist` line; ``kind`` is a key of :data:`SEL_TEXT`."""
        sensor, desc = SEL_TEXT[kind]
        t = T0 + timedelta(seconds=at)
        line = (f"{rec:4x} | {t:%m/%d/%Y} | {t:%H:%M:%S} | {sensor} | {desc} | "
                f"{'Asserted' if asserted else 'Deasserted'}")
        return self._inject([self._add(at, "bmc", node=node, sel=line)])

    def silence(self, at: float, node: str, until: float | None = None) -> Capture:
        """The node stops answering in-band from ``at``: no heartbeats, no NVML samples, no steps."""
        self._silent.setdefault(node, []).append((at, self.duration + 1 if until is None else until))
        for j in self.jobs.values():
            if any(n == node for n, _, _ in j.alloc):
                self.stop_training(j.name, at)
        return self

    def _is_silent(self, node: str, t: float) -> bool:
        return any(a <= t < b for a, b in self._silent.get(node, []))

    # --- delivery ------------------------------------------------------------------------------
    def late(self, by: float) -> Capture:
        """The last injection arrives ``by`` seconds after it happened (its ts is unchanged)."""
        for o in self._last:
            o.arrive = o.t + by
        return self

    def dup(self, after: float = 0.0) -> Capture:
        """The last injection is sent again ``after`` seconds later (the same bytes)."""
        for o in self._last:
            o.copies.append(o.arrive + after)
        return self

    def skew(self, source: str, seconds: float) -> Capture:
        """Every line of ``source`` carries a ts ``seconds`` off (its clock is wrong)."""
        self._skew[source] = seconds
        return self

    def bad_lines(self, at: float) -> Capture:
        """Input that must be dead-lettered: not JSON, no ts, no source, an unknown source."""
        for raw in ["{not json", json.dumps({"source": "kernel", "node": "x", "line": "hi"}),
                    json.dumps({"ts": at_iso(at), "node": "x"}),
                    json.dumps({"ts": at_iso(at), "source": "telepathy"})]:
            self._raw.append((at, raw))
        return self

    def where(self, pred: Callable[[dict[str, Any]], bool]) -> Capture:
        """Select already added lines for ``late``/``dup`` by a predicate on the line."""
        self._last = [o for o in self._obs if pred(o.data)]
        return self

    # --- rendering ------------------------------------------------------------------------------
    def _background(self) -> list[_Obs]:
        out: list[_Obs] = []

        def add(t: float, source: str, **data: Any) -> None:
            out.append(_Obs(t, {"source": source, **data}, 0, t))

        if self._hb is not None:
            every, only = self._hb
            for k, node in enumerate(sorted(self.nodes)):
                if only is not None and node not in only:
                    continue
                t = 1.0 + (k * 3.7) % every
                while t < self.duration:
                    if not self._is_silent(node, t):
                        add(t, "node_agent", node=node, alive=True)
                    t += every
        if self._nvml:
            for k, node in enumerate(sorted(self.nodes)):
                for i in range(self.nodes[node]["gpus"]):
                    t = 2.0 + (k * 1.3 + i * 0.9) % self._nvml
                    while t < self.duration:
                        gone = self._gone.get((node, i))
                        if not self._is_silent(node, t) and (gone is None or t < gone):
                            add(t, "nvml", node=node, gpu=self._gpu_ref(node, i),
                                metrics=self._metrics_at(node, i, t))
                        t += self._nvml
        if self._bmc_every:
            for k, node in enumerate(sorted(self.nodes)):
                t = 5.0 + (k * 7.3) % self._bmc_every
                while t < self.duration:
                    dead = self._bmc_dead.get(node)
                    if dead is not None and t >= dead:
                        if node not in self._bmc_quiet:
                            add(t, "bmc", node=node, reachable=False)
                    else:
                        add(t, "bmc", node=node, power="on")
                    t += self._bmc_every
        for j in self.jobs.values():
            for seg in j.segments:
                for t, d in self._steps(j, seg):
                    if not self._is_silent(seg["node"], t):
                        add(t, "trainer", job=j.name, rank=0, node=seg["node"], **d)
        return out

    def lines(self) -> list[str]:
        """The capture, in arrival order."""
        rows: list[tuple[float, int, str]] = []
        for k, o in enumerate(self._background()):
            rows.append((o.arrive, 10**9 + k, self._render(o)))
        for o in self._obs:
            text = self._render(o)
            rows.append((o.arrive, o.seq, text))
            rows += [(a, o.seq, text) for a in o.copies]
        rows += [(t, 0, raw) for t, raw in self._raw]
        rows.sort(key=lambda r: (r[0], r[1]))
        return [r[2] for r in rows]

    def _render(self, o: _Obs) -> str:
        t = o.t + self._skew.get(o.data["source"], 0.0)
        return json.dumps({"ts": at_iso(t), **o.data}, separators=(",", ":"))

    def write(self, path: Any) -> list[str]:
        lines = self.lines()
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        return lines
