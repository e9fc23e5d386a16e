"""The real storm as a capture: one GPU of a whole-cell job falls off the bus, every other rank follows.

What a 2,048-node cell (16,384 H100s) records when one fixed-size job holds all of it, written as
contract section 1 capture lines (JSON Lines, in the order recorded) with the wording the real sources
use (``/work/shared/scenarios``):

* **the start**: every node's inventory (the job's nodes and ``spare_nodes`` outside it); the job's
  ``job_started`` with its allocation (one rank per GPU), resuming mid-life: its ``checkpoint_loaded``
  of the step it stopped at, then steps, and a ``checkpoint_saved`` every ``checkpoint_every_s``;
* **the steady load**: each node's agent heartbeat every ``heartbeat_every_s`` and each GPU's NVML
  sample every ``nvml_every_s`` (publish-on-change: a snapshot per period), phases spread so the
  load is even;
* **the fault** at ``fault_at_s``: the kernel's XID 79 line for one GPU, that rank's own CUDA error
  (torchelastic, with its error file), and from then on no NVML sample of that GPU;
* **the storm** ``watchdog_after_s`` later: every other rank's ProcessGroupNCCL watchdog, within
  ``watchdog_spread_s`` -- its timeout line AND its "last enqueued / last completed NCCL work" line
  (two framework lines per rank) -- then its worker's torchelastic failure (SIGABRT, no error file),
  then the scheduler's ``job_failed``;
* **the relaunch** ``relaunch_after_s`` after ``job_failed``: the scheduler's ``job_started`` again
  (same size: the failed GPU's node swapped for the first spare), the newest checkpoint loaded, steps
  going on to ``duration_s``.

For ``nodes=2048`` and the defaults: about 207,000 lines in 27 minutes of event time, 49,150 of
them the storm. :meth:`StormCapture.expected` says what a correct pipeline decides about it (the
blamed GPU, the newest checkpoint, the GPUs a restart must request), for the tests and the bench.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["Expected", "StormCapture", "cuda_error", "watchdog_lines", "xid79_line"]

T0 = datetime(2026, 11, 3, 2, 0, tzinfo=UTC)


def _ts(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def _pci(i: int) -> str:
    return f"{0x18 + 0x10 * i:02X}"


def xid79_line(gpu: int) -> str:
    """The kernel's line for GPU ``gpu`` (at the simulated fleet's PCI address) falling off the bus."""
    return (f"NVRM: Xid (PCI:0000:{_pci(gpu).lower()}:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.")


def cuda_error(at: datetime) -> dict[str, Any]:
    """The error file torchelastic writes for the rank whose GPU is gone."""
    return {"message": {"message": "RuntimeError: CUDA error: unknown error", "extraInfo": {
        "py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 388, in <module>\n    "
                        "main()\nRuntimeError: CUDA error: unknown error\n",
        "timestamp": str(int(at.timestamp()))}}}


def watchdog_lines(rank: int, at: datetime, seq: int, timeout_ms: int) -> tuple[str, str]:
    """A rank's two ProcessGroupNCCL watchdog lines: the collective's timeout, then where its work stood."""
    stamp, pid = at.strftime("%m%d %H:%M:%S.%f"), 40_000 + rank % 8
    ran = timeout_ms + 7 + (rank * 37) % 300
    return (f"[rank{rank}]:[E{stamp} {pid} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=268435456, NumelOut=268435456, "
            f"Timeout(ms)={timeout_ms}) ran for {ran} milliseconds before timing out.",
            f"[rank{rank}]:[E{stamp} {pid} ProcessGroupNCCL.cpp:2317] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
            f"Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.")


@dataclass(frozen=True)
class Expected:
    """What the capture must be decided as."""

    job: str
    node: str
    gpu: int
    gpu_uuid: str
    checkpoint_step: int
    checkpoint_path: str
    gpus: int
    fault_at: datetime


@dataclass
class StormCapture:
    nodes: int = 2048
    gpus_per_node: int = 8
    spare_nodes: int = 8
    job: str = "llama3-405b"
    failed_node: int | None = None  # default: a node a third of the way in
    failed_gpu: int = 5
    duration_s: float = 1620.0  # 27 minutes
    heartbeat_every_s: float = 60.0
    nvml_every_s: float = 270.0
    step_every_s: float = 10.0
    checkpoint_every_s: float = 300.0
    resume_step: int = 120_000
    fault_at_s: float = 740.0
    watchdog_after_s: float = 60.0
    watchdog_spread_s: float = 5.0
    relaunch_after_s: float = 420.0
    timeout_ms: int = 60_000
    seq: int = 4_812_337

    def node_name(self, n: int) -> str:
        return f"n{n:04d}"

    def spare_name(self, n: int) -> str:
        return f"spare{n:02d}"

    def uuid(self, node: str, i: int) -> str:
        a, b = zlib.crc32(node.encode()), zlib.crc32(f"{node}/{i}".encode())
        return f"GPU-{a:08x}-{i:04x}-{b >> 16:04x}-{b & 0xFFFF:04x}-{a ^ b:08x}{i:04x}"

    @property
    def bad_node(self) -> int:
        return self.nodes // 3 if self.failed_node is None else self.failed_node

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    def _at(self, s: float) -> datetime:
        return T0 + timedelta(seconds=s)

    def _saves(self) -> list[tuple[float, int]]:
        """(time, step) of every checkpoint saved before the fault."""
        out, s = [], 60.0 + self.checkpoint_every_s
        while s < self.fault_at_s:
            out.append((s, self._step_at(s)))
            s += self.checkpoint_every_s
        return out

    def _step_at(self, s: float) -> int:
        return self.resume_step + int((s - 60.0) // self.step_every_s) * 10

    def expected(self) -> Expected:
        saves = self._saves()
        step = saves[-1][1] if saves else self.resume_step
        node = self.node_name(self.bad_node)
        return Expected(job=self.job, node=node, gpu=self.failed_gpu, gpu_uuid=self.uuid(node, self.failed_gpu),
                        checkpoint_step=step, checkpoint_path=self._ckpt(step), gpus=self.world,
                        fault_at=self._at(self.fault_at_s))

    def _ckpt(self, step: int) -> str:
        return f"/lustre/ckpt/{self.job}/step_{step:08d}"

    def lines(self) -> Iterator[str]:
        """The capture's lines, in time order."""
        obs = sorted(self._observations(), key=lambda x: (x[0], x[1]))
        for t, _, o in obs:
            yield json.dumps({"ts": _ts(self._at(t)), **o}, separators=(",", ":"))

    def write(self, path: Path) -> int:
        """Write the capture to ``path``; how many lines."""
        n = 0
        with path.open("w") as f:
            for line in self.lines():
                f.write(line + "\n")
                n += 1
        return n

    def _observations(self) -> Iterator[tuple[float, int, dict[str, Any]]]:
        all_nodes = [self.node_name(n) for n in range(self.nodes)] + [self.spare_name(n) for n in range(self.spare_nodes)]
        k = 0
        for node in all_nodes:
            k += 1
            yield 0.0, k, {"source": "inventory", "node": node, "rack": f"rack{zlib.crc32(node.encode()) % 128:03d}",
                           "gpus": [{"index": i, "uuid": self.uuid(node, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0",
                                     "name": "NVIDIA H100 80GB HBM3"} for i in range(self.gpus_per_node)]}
        yield 5.0, 0, self._job_started([self.node_name(n) for n in range(self.nodes)])
        yield from self._steady(all_nodes)
        yield from self._training()
        yield from self._storm()
        relaunch = self.fault_at_s + self.watchdog_after_s + self.watchdog_spread_s + 2 + self.relaunch_after_s
        nodes = [self.node_name(n) for n in range(self.nodes) if n != self.bad_node]
        if self.spare_nodes:
            nodes.insert(self.bad_node, self.spare_name(0))
        yield relaunch, 0, self._job_started(nodes)

    def _job_started(self, nodes: list[str]) -> dict[str, Any]:
        g = self.gpus_per_node
        return {"source": "scheduler", "event": "job_started", "job": self.job,
                "allocation": [{"node": node, "gpus": list(range(g)), "ranks": list(range(k * g, (k + 1) * g))}
                               for k, node in enumerate(nodes)],
                "world_size": len(nodes) * g, "elastic": {"min_gpus": self.world, "max_gpus": self.world},
                "checkpoint": {"dir": f"/lustre/ckpt/{self.job}", "interval_s": self.checkpoint_every_s},
                "gpu_class": "H100-80GB", "owner": "pretraining", "max_restarts": 5}

    def _steady(self, nodes: list[str]) -> Iterator[tuple[float, int, dict[str, Any]]]:
        bad, lost_at = self.node_name(self.bad_node), self.fault_at_s
        for n, node in enumerate(nodes):
            phase = (n * 7919) % 1000 / 1000
            t = 1.0 + phase * self.heartbeat_every_s
            while t < self.duration_s:
                yield t, 1, {"source": "node_agent", "node": node, "alive": True}
                t += self.heartbeat_every_s
            for i in range(self.gpus_per_node):
                t = 2.0 + ((n * self.gpus_per_node + i) * 104729) % 10_000 / 10_000 * self.nvml_every_s
                while t < self.duration_s:
                    if not (node == bad and i == self.failed_gpu and t > lost_at):
                        yield t, 2, {"source": "nvml", "node": node, "gpu": {
                            "index": i, "uuid": self.uuid(node, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0"},
                            "metrics": {"temperature_c": 58 + (n + i) % 9, "power_w": 610 + (n * 3 + i) % 60,
                                        "power_limit_w": 700, "utilization_pct": 97, "memory_used_mib": 71_200,
                                        "memory_total_mib": 81_559, "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0,
                                        "remapped_rows_pending": False, "remapped_rows_failure": False,
                                        "clocks_event_reasons": []}}
                    t += self.nvml_every_s

    def _trainer(self, node: str, event: str, **kw: Any) -> dict[str, Any]:
        return {"source": "trainer", "job": self.job, "rank": 0, "node": node, "event": event, **kw}

    def _training(self) -> Iterator[tuple[float, int, dict[str, Any]]]:
        n0 = self.node_name(0)
        yield 50.0, 3, self._trainer(n0, "checkpoint_loaded", step=self.resume_step, path=self._ckpt(self.resume_step))
        t = 60.0 + self.step_every_s
        while t < self.fault_at_s:
            yield t, 3, self._trainer(n0, "step", step=self._step_at(t), loss=round(1.92 - t * 1e-5, 4),
                                      samples_per_s=4210.0)
            t += self.step_every_s
        for s, step in self._saves():
            yield s + 4.8, 3, self._trainer(n0, "checkpoint_saved", step=step, path=self._ckpt(step),
                                            bytes=2_400_000_000_000, seconds=4.8)
        resumed = self.expected().checkpoint_step
        relaunch = self.fault_at_s + self.watchdog_after_s + self.watchdog_spread_s + 2 + self.relaunch_after_s
        yield relaunch + 40, 3, self._trainer(n0, "checkpoint_loaded", step=resumed, path=self._ckpt(resumed))
        t, step = relaunch + 50, resumed
        saved = t
        while t < self.duration_s:
            step += 10
            yield t, 3, self._trainer(n0, "step", step=step, loss=1.91, samples_per_s=4190.0)
            if t - saved >= self.checkpoint_every_s:
                saved = t
                yield t + 4.8, 3, self._trainer(n0, "checkpoint_saved", step=step, path=self._ckpt(step),
                                                bytes=2_400_000_000_000, seconds=4.8)
            t += self.step_every_s

    def _storm(self) -> Iterator[tuple[float, int, dict[str, Any]]]:
        g, f = self.gpus_per_node, self.fault_at_s
        bad = self.node_name(self.bad_node)
        bad_rank = self.bad_node * g + self.failed_gpu
        yield f, 4, {"source": "kernel", "node": bad, "line": xid79_line(self.failed_gpu)}
        yield f + 1.5, 4, {"source": "torchelastic", "job": self.job, "node": bad, "rank": bad_rank, "exitcode": 1,
                           "error_file": cuda_error(self._at(f + 1.5))}
        w0 = f + self.watchdog_after_s
        for r in range(self.world):
            if r == bad_rank:
                continue
            at = w0 + self.watchdog_spread_s * r / self.world
            base = {"source": "framework", "job": self.job, "node": self.node_name(r // g), "rank": r,
                    "local_rank": r % g}
            timeout, progress = watchdog_lines(r, self._at(at), self.seq, self.timeout_ms)
            yield at, 5, {**base, "line": timeout}
            yield at + 0.001, 5, {**base, "line": progress}
            yield at + 1.0, 6, {"source": "torchelastic", "job": self.job, "node": base["node"], "rank": r,
                                "exitcode": -6, "error_file": None}
        yield w0 + self.watchdog_spread_s + 2, 7, {"source": "scheduler", "event": "job_failed", "job": self.job}


def main(argv: list[str] | None = None) -> None:
    """``python -m faultline.storm_capture OUT.jsonl [--nodes 2048]``: write the capture, then `faultline replay` it."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("out", type=Path)
    ap.add_argument("--nodes", type=int, default=2048, help="nodes of 8 GPUs, all of them the job's")
    args = ap.parse_args(argv)
    cap = StormCapture(nodes=args.nodes)
    n = cap.write(args.out)
    want = cap.expected()
    print(f"{n:,} lines; expect gpu_off_bus on {want.node} GPU {want.gpu} ({want.gpu_uuid}), one restart_job of "
          f"{want.gpus:,} GPUs from step {want.checkpoint_step}")


if __name__ == "__main__":
    main()
