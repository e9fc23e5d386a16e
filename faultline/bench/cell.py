"""A 16,384-GPU cell as its node agents would publish it: the steady load, the storm, an XID.

One job holds the whole cell (Llama 3's run: 2,048 nodes x 8 GPUs, one rank per GPU), so one
correlator must carry it. Every observation is a capture line in the contract's format, parsed by
the agents' own parser (:func:`producers.capture.parse_capture_line`), and each node's events of one
tick travel as one record -- the way a node agent sends what it observed together
(:mod:`producers.batching`, ``per_source``).

* the **start**: every node's inventory, then the job's start with its 16,384-rank allocation;
* the **steady load** (:meth:`Cell.steady_tick`): what the topic plan expects after
  publish-on-change (``deploy/topics.py``: a GPU sends ~0.27 samples/s; a heartbeat per node every
  15 s; rank 0's training steps) -- about 4,400 events/s for the cell;
* the **fault** (:meth:`Cell.fault`): a GPU of the job falls off the bus (the kernel's XID 79 line)
  and its rank dies of the CUDA error; the job resumed mid-life (:meth:`Cell.resumed`,
  :meth:`Cell.saved`: its checkpoint loaded, checkpoints saved);
* the **storm** (:meth:`Cell.storm`) a minute later: every other rank's ProcessGroupNCCL watchdog
  reports the collective timeout (its timeout line and its progress line), then torchelastic
  reports every worker's failure -- ~49,000 events spread over ``seconds`` -- then the
  scheduler's ``job_failed`` (:meth:`Cell.failed`) and, once faultline asked for it, its relaunch
  (:meth:`Cell.relaunch`); the same shape, in the same words, as the capture of
  :mod:`faultline.storm_capture`;
* an **XID** on a GPU of a node outside the job (:meth:`Cell.xid`), whose quarantine command the
  bench waits for: how long the correlator takes to act on a new fault.

Times are given by the caller (wall time for a live worker, any for an offline engine).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from faultline.storm_capture import cuda_error, watchdog_lines, xid79_line
from producers.capture import parse_capture_line
from streams.events import Event

__all__ = ["Cell", "Record"]


@dataclass(frozen=True)
class Record:
    """One node's events of one tick: what one agent sends as one record, and when."""

    at: datetime
    node: str
    events: list[Event]


def _ts(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def _pci(i: int) -> str:
    return f"{0x18 + 0x10 * i:02X}"


@dataclass
class Cell:
    nodes: int = 2048
    gpus_per_node: int = 8
    job: str = "llama3-405b"
    samples_per_gpu_s: float = 0.27  # deploy/topics.py: 0.25 x 1 Hz changed + 1 per 60 s snapshot
    heartbeat_every_s: float = 15.0
    spare_nodes: int = 16  # outside the job: where the bench's XIDs land

    def node_name(self, n: int) -> str:
        return f"cell-{n:04d}"

    def spare_name(self, n: int) -> str:
        return f"spare-{n:02d}"

    def uuid(self, node: str, i: int) -> str:
        return f"GPU-{zlib.crc32(node.encode()):08x}-{i:04d}-{zlib.crc32(f'{node}/{i}'.encode()):08x}"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def _events(self, obs: dict[str, Any]) -> list[Event]:
        return parse_capture_line(json.dumps(obs, separators=(",", ":")))

    def _inventory(self, node: str, t: datetime) -> list[Event]:
        return self._events({"ts": _ts(t), "source": "inventory", "node": node, "rack": f"rack-{zlib.crc32(node.encode()) % 256}",
                             "gpus": [{"index": i, "uuid": self.uuid(node, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0",
                                       "name": "NVIDIA H100 80GB HBM3"} for i in range(self.gpus_per_node)]})

    def start(self, t: datetime) -> Iterator[Record]:
        """Every node's inventory, then the job's start (one record each)."""
        for n in range(self.nodes):
            yield Record(t, self.node_name(n), self._inventory(self.node_name(n), t))
        for n in range(self.spare_nodes):
            yield Record(t, self.spare_name(n), self._inventory(self.spare_name(n), t))
        yield self._started(t, [self.node_name(n) for n in range(self.nodes)])

    def _started(self, t: datetime, nodes: list[str]) -> Record:
        g = self.gpus_per_node
        return Record(t, "scheduler", self._events({
            "ts": _ts(t), "source": "scheduler", "event": "job_started", "job": self.job,
            "allocation": [{"node": node, "gpus": list(range(g)), "ranks": list(range(k * g, (k + 1) * g))}
                           for k, node in enumerate(nodes)],
            "world_size": self.gpus, "elastic": {"min_gpus": self.gpus, "max_gpus": self.gpus},
            "checkpoint": {"dir": f"/ckpt/{self.job}", "interval_s": 1800}, "gpu_class": "H100-80GB",
            "owner": "pretraining", "max_restarts": 3}))

    def relaunch(self, t: datetime, failed_node: int) -> Record:
        """The scheduler starts the job again at the same size: the failed node swapped for the last spare."""
        nodes = [self.node_name(n) for n in range(self.nodes)]
        nodes[failed_node] = self.spare_name(self.spare_nodes - 1)
        return self._started(t, nodes)

    def _trainer(self, t: datetime, event: str, **kw: Any) -> Record:
        node = self.node_name(0)
        return Record(t, node, self._events({"ts": _ts(t), "source": "trainer", "job": self.job, "rank": 0,
                                             "node": node, "event": event, **kw}))

    def ckpt(self, step: int) -> str:
        return f"/ckpt/{self.job}/step_{step:08d}"

    def resumed(self, t: datetime, step: int) -> Record:
        """Rank 0 loaded the checkpoint of ``step``: the job resumes mid-life."""
        return self._trainer(t, "checkpoint_loaded", step=step, path=self.ckpt(step))

    def saved(self, t: datetime, step: int) -> Record:
        return self._trainer(t, "checkpoint_saved", step=step, path=self.ckpt(step), bytes=2_400_000_000_000,
                             seconds=4.8)

    def step(self, t: datetime, step: int) -> Record:
        return self._trainer(t, "step", step=step, loss=1.9, samples_per_s=4200.0)

    def fault(self, t: datetime, node: int, gpu: int) -> list[Record]:
        """GPU ``gpu`` of job node ``node`` falls off the bus; its rank dies of the CUDA error 1.5 s later."""
        name, at = self.node_name(node), t + timedelta(seconds=1.5)
        return [Record(t, name, self._events({"ts": _ts(t), "source": "kernel", "node": name, "line": xid79_line(gpu)})),
                Record(at, name, self._events({"ts": _ts(at), "source": "torchelastic", "job": self.job, "node": name,
                                               "rank": node * self.gpus_per_node + gpu, "exitcode": 1,
                                               "error_file": cuda_error(at)}))]

    def failed(self, t: datetime) -> Record:
        return Record(t, "scheduler", self._events({"ts": _ts(t), "source": "scheduler", "event": "job_failed",
                                                    "job": self.job}))

    def steady_tick(self, second: int, t: datetime, steps: bool = True) -> Iterator[Record]:
        """Second ``second`` of the steady load: the nodes whose turn it is, each one record."""
        period = max(1, round(1 / self.samples_per_gpu_s))  # a GPU speaks every ~4 s
        hb = max(1, round(self.heartbeat_every_s))
        for n in range(self.nodes):
            node = self.node_name(n)
            obs: list[dict[str, Any]] = []
            for i in range(self.gpus_per_node):
                if (n * self.gpus_per_node + i + second) % period == 0:
                    obs.append({"ts": _ts(t), "source": "nvml", "node": node, "gpu": {
                        "index": i, "uuid": self.uuid(node, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0"},
                        "metrics": {"temperature_c": 60 + (n + i + second) % 7, "power_w": 600 + (n * i + second) % 40,
                                    "utilization_pct": 98, "ecc_dbe_volatile": 0, "remapped_rows_pending": 0}})
            if (n + second) % hb == 0:
                obs.append({"ts": _ts(t), "source": "node_agent", "node": node, "alive": True})
            if n == 0 and steps:
                obs.append({"ts": _ts(t), "source": "trainer", "job": self.job, "rank": 0, "node": node,
                            "event": "step", "step": 100_000 + second, "loss": 1.9, "samples_per_s": 4200.0})
            events = [e for o in obs for e in self._events(o)]
            if events:
                yield Record(t, node, events)

    def storm(self, t: datetime, seconds: float = 5.0, hung_rank: int = 12_345) -> Iterator[Record]:
        """Rank ``hung_rank`` is gone; every other rank's watchdog lines within ``seconds``, then torchelastic's
        failure of every other worker. One record per node per phase, in time order."""
        g, seq = self.gpus_per_node, 4_812_337
        watch = seconds * 0.6
        for n in range(self.nodes):
            at = t + timedelta(seconds=watch * n / self.nodes)
            node = self.node_name(n)
            obs: list[dict[str, Any]] = []
            for r in range(n * g, (n + 1) * g):
                if r == hung_rank:
                    continue
                base = {"ts": _ts(at), "source": "framework", "job": self.job, "node": node, "rank": r,
                        "local_rank": r % g}
                obs += [{**base, "line": line} for line in watchdog_lines(r, at, seq, 60_000)]
            yield Record(at, node, [e for o in obs for e in self._events(o)])
        for n in range(self.nodes):
            at = t + timedelta(seconds=watch + (seconds - watch) * n / self.nodes)
            node = self.node_name(n)
            obs = [{"ts": _ts(at), "source": "torchelastic", "job": self.job, "node": node, "rank": r,
                    "exitcode": -6, "error_file": None} for r in range(n * g, (n + 1) * g) if r != hung_rank]
            yield Record(at, node, [e for o in obs for e in self._events(o)])

    def xid(self, spare: int, t: datetime, gpu: int = 3) -> Record:
        """XID 79 (fallen off the bus) on a GPU of a spare node: its quarantine command is what is timed."""
        node = self.spare_name(spare)
        return Record(t, node, self._events({"ts": _ts(t), "source": "kernel", "node": node, "line": xid79_line(gpu)}))
