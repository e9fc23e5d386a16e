"""A small simulated fleet that writes capture lines (the contract's format).

Used by `faultline demo` and by tests and benchmarks that need realistic
traffic: inventory, 1 Hz-ish NVML samples, agent heartbeats, trainer steps and
checkpoints, and faults injected at chosen times, as the real sources word them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["Fleet", "FaultPlan"]

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _ts(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def _pci(i: int) -> str:
    return f"{0x18 + 0x10 * i:02X}"


@dataclass
class FaultPlan:
    """An XID on one GPU at ``at_s`` seconds, with the crash and the collective timeouts that follow."""

    at_s: float = 600
    node: int = 2
    gpu: int = 5
    xid: int = 79


@dataclass
class Fleet:
    """Nodes training one job, with a fault and the scheduler's relaunch after it.

    The rule for the defaults (what `faultline demo` streams): the capture outlasts the whole story.
    The GPU falls off the bus at ``fault.at_s``; the correlator restarts the job ``timing.settle_s``
    later; the scheduler relaunches it ``recover_after_s`` after the fault on healthy GPUs (the
    spare node in place of the faulty GPU's), the trainer loads its newest checkpoint and steps at
    its old throughput; the incident is resolved once that has held ``timing.verify_hold_s``
    (300 s). 600 + 90 + 30 + 300 = 1,020 s, so 20 minutes leaves the verification three minutes
    to spare: a demo whose incident is still verifying at its end tells an unfinished story.
    """

    nodes: int = 4
    gpus_per_node: int = 8
    duration_s: float = 1200
    sample_every_s: float = 10
    heartbeat_every_s: float = 15
    step_every_s: float = 10
    checkpoint_every_s: float = 300
    job: str = "llm-demo"
    seed: int = 7
    fault: FaultPlan | None = field(default_factory=FaultPlan)
    spare_nodes: int = 1
    recover_after_s: float | None = 90  # the scheduler restarts the job (off the bad GPU) this long after the fault

    def node_name(self, n: int) -> str:
        return f"gpu-node-{n + 1:02d}"

    def uuid(self, n: int, i: int) -> str:
        r = random.Random(f"{self.seed}-{n}-{i}")
        h = "".join(r.choice("0123456789abcdef") for _ in range(32))
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def lines(self) -> Iterator[str]:
        """Capture lines in time order."""
        for t, obs in sorted(self._observations(), key=lambda x: x[0]):
            yield json.dumps({"ts": _ts(t), **obs})

    def _observations(self) -> Iterator[tuple[datetime, dict[str, Any]]]:
        rnd = random.Random(self.seed)
        g = self.gpus_per_node
        for n in range(self.nodes + self.spare_nodes):
            yield T0, {"source": "inventory", "node": self.node_name(n), "rack": "r1", "gpus": [
                {"index": i, "uuid": self.uuid(n, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0",
                 "name": "NVIDIA H100 80GB HBM3", "power_domain": f"psu-{'A' if i < g // 2 else 'B'}"}
                for i in range(g)]}
        start = T0 + timedelta(seconds=10)
        yield start, {"source": "scheduler", "event": "job_started", "job": self.job, "allocation": [
            {"node": self.node_name(n), "gpus": list(range(g)), "ranks": list(range(n * g, (n + 1) * g))}
            for n in range(self.nodes)], "world_size": self.nodes * g,
            "elastic": {"min_gpus": self.nodes * g, "max_gpus": self.nodes * g},
            "checkpoint": {"dir": f"/mnt/ckpt/{self.job}", "interval_s": self.checkpoint_every_s},
            "gpu_class": "H100-80GB", "owner": "ml-team", "max_restarts": 3}
        fault_t = T0 + timedelta(seconds=self.fault.at_s) if self.fault else None
        end = T0 + timedelta(seconds=self.duration_s)
        yield from self._telemetry(rnd, end, fault_t)
        yield from self._training(rnd, start, end, fault_t)
        if self.fault and fault_t:
            yield from self._fault(fault_t)
            if self.recover_after_s is not None:
                yield from self._recovery(rnd, fault_t + timedelta(seconds=self.recover_after_s), end)

    def _telemetry(self, rnd: random.Random, end: datetime, fault_t: datetime | None) -> Iterator[tuple[datetime, dict[str, Any]]]:
        for n in range(self.nodes + self.spare_nodes):
            node = self.node_name(n)
            t = T0 + timedelta(seconds=rnd.uniform(0, self.heartbeat_every_s))
            while t < end:
                yield t, {"source": "node_agent", "node": node, "alive": True}
                t += timedelta(seconds=self.heartbeat_every_s)
            for i in range(self.gpus_per_node):
                t = T0 + timedelta(seconds=rnd.uniform(0, self.sample_every_s))
                while t < end:
                    lost = self.fault and fault_t and t > fault_t and (n, i) == (self.fault.node, self.fault.gpu)
                    if not lost:
                        yield t, {"source": "nvml", "node": node, "gpu": {
                            "index": i, "uuid": self.uuid(n, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0"},
                            "metrics": {"temperature_c": round(rnd.gauss(62, 3), 1), "power_w": round(rnd.gauss(520, 30)),
                                        "power_limit_w": 700, "utilization_pct": 98, "ecc_sbe_volatile": 0,
                                        "ecc_dbe_volatile": 0, "remapped_rows_pending": 0,
                                        "clocks_event_reasons": []}}
                    t += timedelta(seconds=self.sample_every_s)

    def _training(self, rnd: random.Random, start: datetime, end: datetime,
                  fault_t: datetime | None) -> Iterator[tuple[datetime, dict[str, Any]]]:
        step, loss, t = 0, 2.4, start + timedelta(seconds=self.step_every_s)
        last_ck = start
        stop = min(end, fault_t) if fault_t else end
        while t < stop:
            step += 10
            loss = max(0.5, loss - rnd.uniform(0, 0.002))
            yield t, {"source": "trainer", "job": self.job, "rank": 0, "node": self.node_name(0), "event": "step",
                      "step": step, "loss": round(loss, 4), "samples_per_s": round(rnd.gauss(430, 5), 1)}
            if (t - last_ck).total_seconds() >= self.checkpoint_every_s:
                last_ck = t
                yield t + timedelta(seconds=5), {
                    "source": "trainer", "job": self.job, "rank": 0, "node": self.node_name(0),
                    "event": "checkpoint_saved", "step": step, "path": f"/mnt/ckpt/{self.job}/step_{step:07d}",
                    "bytes": 14_000_000_000, "seconds": 5.0}
            t += timedelta(seconds=self.step_every_s)

    def _recovery(self, rnd: random.Random, t: datetime, end: datetime) -> Iterator[tuple[datetime, dict[str, Any]]]:
        """The job comes back on the spare node instead of the faulty GPU's node, from its last checkpoint."""
        f = self.fault
        assert f is not None
        g = self.gpus_per_node
        nodes = [n for n in range(self.nodes + self.spare_nodes) if n != f.node][: self.nodes]
        yield t, {"source": "scheduler", "event": "job_started", "job": self.job, "allocation": [
            {"node": self.node_name(n), "gpus": list(range(g)), "ranks": list(range(k * g, (k + 1) * g))}
            for k, n in enumerate(nodes)], "world_size": self.nodes * g,
            "elastic": {"min_gpus": self.nodes * g, "max_gpus": self.nodes * g},
            "checkpoint": {"dir": f"/mnt/ckpt/{self.job}", "interval_s": self.checkpoint_every_s},
            "gpu_class": "H100-80GB", "owner": "ml-team", "max_restarts": 3}
        step = self._last_checkpoint_step(f.at_s)
        yield t + timedelta(seconds=20), {"source": "trainer", "job": self.job, "rank": 0, "node": self.node_name(nodes[0]),
                                          "event": "checkpoint_loaded", "step": step,
                                          "path": f"/mnt/ckpt/{self.job}/step_{step:07d}"}
        t += timedelta(seconds=30)
        while t < end:
            step += 10
            yield t, {"source": "trainer", "job": self.job, "rank": 0, "node": self.node_name(nodes[0]),
                      "event": "step", "step": step, "loss": 2.3, "samples_per_s": round(rnd.gauss(430, 5), 1)}
            t += timedelta(seconds=self.step_every_s)

    def _last_checkpoint_step(self, fault_s: float) -> int:
        steps_per_s = 10 / self.step_every_s
        saved_at = (fault_s - 10) // self.checkpoint_every_s * self.checkpoint_every_s
        return int(saved_at * steps_per_s)

    def _fault(self, t: datetime) -> Iterator[tuple[datetime, dict[str, Any]]]:
        f = self.fault
        assert f is not None
        node = self.node_name(f.node)
        rank = f.node * self.gpus_per_node + f.gpu
        yield t, {"source": "kernel", "node": node, "line": f"NVRM: Xid (PCI:0000:{_pci(f.gpu).lower()}:00): {f.xid}, "
                  "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}
        yield t + timedelta(seconds=1.5), {
            "source": "torchelastic", "job": self.job, "node": node, "rank": rank, "exitcode": 1,
            "error_file": {"message": {"message": "RuntimeError: CUDA error: unknown error",
                                       "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "0"}}}}
        for r in range(self.nodes * self.gpus_per_node):
            if r == rank:
                continue
            n = r // self.gpus_per_node
            yield t + timedelta(seconds=3, milliseconds=r), {
                "source": "framework", "job": self.job, "node": self.node_name(n), "rank": r,
                "local_rank": r % self.gpus_per_node,
                "line": f"[rank{r}]:[E] ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
                        "timeout: WorkNCCL(SeqNum=900, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                        "ran for 600100 milliseconds before timing out."}
        yield t + timedelta(seconds=5), {"source": "scheduler", "event": "job_failed", "job": self.job}
