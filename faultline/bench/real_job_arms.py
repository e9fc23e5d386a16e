"""The two arms of ``faultline bench --real-job``: the same job, the same seeded faults, two ways back.

Both arms run the example job as a torchrun group of ``ranks`` workers on GPU slots of two emulated nodes
of 8 GPUs each (``<arm>-a``, ``<arm>-b``; the ranks start on the first node's slots 0.., the rest are spares), and play the schedule to it (:meth:`Arm.inject`). A slot hit by
a fatal XID stays broken until ``repair_s`` later (a person repairs it): any worker started on it meanwhile
fails at once, with the XID again -- restarting in place on broken hardware fails again.

* :class:`Baseline` ("without faultline", torchrun-style): the group is restarted in place at once
  (torchrun's ``--max-restarts``, see the class); a hang is noticed by the collective timeout alone. When
  the restarts are spent, a person relaunches the group in place once its slots are repaired (no fencing),
  ``notice_s`` at the soonest.
* :class:`WithFaultline`: torchrun does not restart (``--max-restarts 0``); the job's own observations --
  the reporter's file, each worker's stderr, torchelastic's error files, as the agent follows them -- and
  the node's (the kernel's XID lines, NVML samples of a warning GPU, the agent's heartbeat) go through the
  capture screen to the real :class:`~correlators.engine.Correlator` (default policy) live, and its clock
  follows the wall clock (``advance_to``). A local executor acts on the commands: ``restart_job`` relaunches
  the group from the checkpoint it names, fenced slots replaced by spares; ``checkpoint_now`` writes the file
  the job polls; ``quarantine_gpu``/``cordon_node`` fence slots. A restart that needs a person's approval
  is approved ``approval_s`` later; a job left down with no restart for ``human_s`` is relaunched by a person.
  No Kafka: the engine is the one the worker runs, fed in-process.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultline.bench.real_job_plan import Fault
from faultline.bench.real_job_proc import Group, pci, uuid, xid_line

__all__ = ["SLOTS", "PER_NODE", "Knobs", "Arm", "Baseline", "inventory"]

PER_NODE = 8
SLOTS = 2 * PER_NODE  # two emulated nodes of 8 GPU slots: slot s is GPU s % 8 of node s // 8


@dataclass(frozen=True)
class Knobs:
    ranks: int = 2
    step_s: float = 0.5
    checkpoint_every: int = 90
    collective_timeout_s: float = 600.0  # the job's collective timeout: NCCL's default, as the goodput model's
    repair_s: float = 300.0   # a person repairs a broken GPU this long after it broke
    notice_s: float = 60.0    # a person notices a job torchrun gave up on
    approval_s: float = 120.0  # a person approves a restart that waits for them
    human_s: float = 300.0    # a person relaunches a job left down with no restart decided
    baseline_restarts: int = 3  # torchrun's --max-restarts, per launch by a person
    restart_budget: int = 10    # the restarts the job's owner allows faultline (job_started's max_restarts)


@dataclass
class Arm:
    name: str
    out: Path
    faults: list[Fault]
    k: Knobs
    t0: float = 0.0
    wall0: datetime = field(default_factory=lambda: datetime.now(UTC))
    placement: list[int] = field(default_factory=list)
    broken: dict[int, float] = field(default_factory=dict)   # slot -> repaired at (arm seconds)
    fenced: set[int] = field(default_factory=set)
    group: Group | None = None
    launches: list[dict[str, Any]] = field(default_factory=list)
    injected: list[dict[str, Any]] = field(default_factory=list)
    refused: set[int] = field(default_factory=set)  # worker pids already failed on a broken slot
    _done: int = 0
    _warned: dict[int, float] = field(default_factory=dict)
    _warn_slot: dict[float, int] = field(default_factory=dict)  # a warned fault's slot, from its first warning

    @property
    def job(self) -> str:
        return f"realjob-{self.name}"

    @property
    def nodes(self) -> list[str]:
        return [f"{self.name}-{n}" for n in "ab"]

    def node_of(self, slot: int) -> str:
        return self.nodes[slot // PER_NODE]

    @property
    def node(self) -> str:
        """Where rank 0 runs (what the workers give as their node)."""
        return self.node_of(self.placement[0]) if self.placement else self.nodes[0]

    def now_s(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.t0, self.wall0 = time.monotonic(), datetime.now(UTC)
        self.placement = list(range(self.k.ranks))
        self.on_start()
        self.launch("start", None)

    def on_start(self) -> None:
        """What an arm does before the first launch."""

    def launch(self, why: str, checkpoint: str | None) -> None:
        if self.group is not None:
            self.group.stop()
        self.group = Group(self.job, self.node, self.out, list(self.placement), len(self.launches),
                           self.max_restarts(), self.k.step_s, self.k.checkpoint_every, self.k.collective_timeout_s)
        self.group.start()
        self.launches.append({"at_s": round(self.now_s(), 1), "slots": list(self.placement), "why": why,
                              "checkpoint": checkpoint})
        self.on_launch()

    def max_restarts(self) -> int:
        return 0

    def on_launch(self) -> None:
        """What an arm tells the world when its group starts."""

    def emit(self, obs: dict[str, Any]) -> None:
        """A node-side observation (the kernel's line, an NVML sample): only faultline listens."""

    def ts(self) -> str:
        return datetime.now(UTC).isoformat(timespec="milliseconds")

    def poll(self) -> None:
        now = self.now_s()
        self._warn(now)
        while self._done < len(self.faults) and self.faults[self._done].at_s <= now:
            self.inject(self.faults[self._done], now)
            self._done += 1
        self._refuse_on_broken(now)
        self.step(now)

    def step(self, now: float) -> None:
        """The arm's own way back."""

    def inject(self, f: Fault, now: float) -> None:
        g = self.group
        slot = self.placement[f.rank]
        rank = f.rank
        if f.kind == "predictable":  # the GPU that warned fails, and the rank on it (if any) dies
            slot = self._warn_slot.get(f.at_s, slot)
            rank = self.placement.index(slot) if slot in self.placement else -1
        hit = False
        if g is not None and f.kind == "sigkill":
            hit = g.signal_rank(f.rank, signal.SIGKILL)
        elif g is not None and f.kind == "hang":
            hit = g.signal_rank(f.rank, signal.SIGSTOP)
        elif f.kind in ("xid", "predictable"):
            self.broken[slot] = now + self.k.repair_s
            self.emit({"ts": self.ts(), "source": "kernel", "node": self.node_of(slot),
                       "line": xid_line(slot % PER_NODE, 79, "GPU has fallen off the bus.")})
            if g is not None and rank >= 0:
                self.refused.update(pid for r, pid in g.workers().items() if r == rank)  # it fails once
                hit = g.signal_rank(rank, signal.SIGKILL)
        self.injected.append({"at_s": round(now, 1), "planned_s": f.at_s, "kind": f.kind, "rank": rank,
                              "slot": slot, "hit_a_worker": hit})

    def _warn(self, now: float) -> None:
        """A predictable fault's warning: its slot at 96 C with thermal slowdown, sampled every 10 s."""
        for i, f in enumerate(self.faults):
            if f.kind == "predictable" and f.warn_s <= now < f.at_s and now - self._warned.get(i, -1e9) >= 10:
                self._warned[i] = now
                slot = self._warn_slot.setdefault(f.at_s, self.placement[f.rank])
                node, index = self.node_of(slot), slot % PER_NODE
                self.emit({"ts": self.ts(), "source": "nvml", "node": node,
                           "gpu": {"index": index, "uuid": uuid(node, index)},
                           "metrics": {"temperature_c": 96.0, "clocks_event_reasons": ["HW_THERMAL_SLOWDOWN"]}})

    def _refuse_on_broken(self, now: float) -> None:
        g = self.group
        if g is None:
            return
        for rank, pid in g.workers().items():
            slot = g.slots[rank] if rank < len(g.slots) else -1
            if self.broken.get(slot, -1.0) > now and pid not in self.refused:
                self.refused.add(pid)
                self.emit({"ts": self.ts(), "source": "kernel", "node": self.node_of(slot),
                           "line": xid_line(slot % PER_NODE, 79, "GPU has fallen off the bus.")})
                g.signal_rank(rank, signal.SIGKILL)
                self.injected.append({"at_s": round(now, 1), "kind": "broken_slot_again", "rank": rank,
                                      "slot": slot})

    def stop(self) -> None:
        if self.group is not None:
            self.group.stop()

    def steps(self) -> list[tuple[float, int]]:
        """Rank 0's steps, in seconds from the arm's start."""
        return [(t, r["step"]) for t, r in self.trainer() if r.get("event") == "step" and r.get("rank") == 0]

    def trainer(self) -> list[tuple[float, dict[str, Any]]]:
        path = self.out / "trainer.jsonl"
        out = []
        for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
            try:
                r = json.loads(line)
                t = (datetime.fromisoformat(r["ts"]) - self.wall0).total_seconds()
            except (ValueError, KeyError):
                continue
            out.append((t, r))
        return out


@dataclass
class Baseline(Arm):
    """torchrun-style: after a failure the group is restarted in place at once, from the newest checkpoint,
    up to ``baseline_restarts`` times per launch by a person (torchrun's ``--max-restarts``); then a person
    relaunches it in place, ``notice_s`` after it stopped at the soonest and once its slots are repaired.
    The in-place restart is a fresh torchrun on the same slots: torchrun's own restart of gloo workers fails
    here at the rendezvous (the new workers read the old workers' addresses from the agent's store)."""

    relaunch_at: float | None = None
    restarts_left: int = 0

    def on_start(self) -> None:
        self.restarts_left = self.k.baseline_restarts

    def step(self, now: float) -> None:
        if self.group is None or self.group.alive():
            return
        if self.restarts_left > 0:
            self.restarts_left -= 1
            self.launch("torchrun restarts in place", None)
            return
        if self.relaunch_at is None:
            repaired = max([self.broken.get(s, 0.0) for s in self.placement] + [0.0])
            self.relaunch_at = max(now + self.k.notice_s, repaired)
        repaired = max([self.broken.get(s, 0.0) for s in self.placement] + [0.0])
        if now >= self.relaunch_at and now >= repaired:  # a person does not relaunch on a GPU known broken
            self.relaunch_at = None
            self.restarts_left = self.k.baseline_restarts
            self.launch("a person relaunches in place, once its GPUs are repaired", None)


def inventory(node: str, ts: str) -> dict[str, Any]:
    return {"ts": ts, "source": "inventory", "node": node, "rack": "r1", "gpus": [
        {"index": i, "uuid": uuid(node, i), "pci_bus_id": f"00000000:{pci(i).upper()}:00.0",
         "name": "NVIDIA H100 80GB HBM3", "power_domain": f"psu-{'A' if i < 4 else 'B'}"} for i in range(PER_NODE)]}
