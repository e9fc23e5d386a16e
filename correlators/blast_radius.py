"""No single source can fence a fleet: the blast-radius limit on fencing commands (issue 26).

A forged XID 79 on every node of a 200-node cell made the correlator quarantine 200 GPUs; only the
executor's breaker held, and only as a *rate*. The rule, decided here in the correlator over event
time, for every fencing command (:data:`FENCES`: ``quarantine_gpu``, ``reset_gpu``, ``cordon_node``,
``drain_node``, ``reboot_node``) as the planner issues it:

* **the window**: the nodes and GPUs fenced without approval in the last ``window_s`` (event
  time) are counted per cell (one engine is one cell), per rack and per job; a fence of a node
  (or GPU) already counted in the window passes (a drain after its cordon is no new node);
* **the share**: the nodes out of service at once (fenced without approval, ever, and not yet
  released) are at most ``max_fenced_share`` of the cell's known nodes -- but never capped below
  ``min_fenced`` (a cell of four nodes may lose all four to a real fault);
* past either, the fence is still issued, with ``requires_approval: true`` and a reason that
  names the rule and the count (``blast radius: 17 nodes fenced in the cell within 600 s, the
  limit is 16``): it waits for a person, the incident says why, and
  ``faultline_blast_radius_held_total`` counts it (alert ``BlastRadiusExceeded``);
* **tickets and notifications**: past ``group_past`` of one type in the window, one grouped
  ticket (notification) is issued for the rest of the window instead of one each.

The defaults (policy.yaml ``blast_radius``) let through what a real multi-node fault needs: a
rack outage or a power feed takes one rack (up to 16 nodes, 128 GPUs), a job's failure its own
nodes; a storm across the cell stops at 16 nodes and 128 GPUs per 10 minutes and half the cell at
once (NVIDIA NVSentinel caps remediation at 50 % of nodes per 5 minutes).
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from common.metrics import BLAST_RADIUS_HELD
from correlators.quarantine_ledger import QuarantineLedger
from correlators.state_fields import Bounded, Instant
from correlators.topology import Topology
from streams.decisions import Command, Target

__all__ = ["FENCES", "BlastLimits", "BlastRadius", "FenceMark"]

FENCES = frozenset({"quarantine_gpu", "reset_gpu", "cordon_node", "drain_node", "reboot_node"})
_GROUPED = frozenset({"open_ticket", "notify"})
_NODE_FENCES = frozenset({"cordon_node", "drain_node", "reboot_node"})
_MARKS = 100_000  # fences remembered in the window (a bound on the state; far above any limit)


class BlastLimits(BaseModel):
    """The policy's knobs (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(default=600, gt=0)
    max_nodes_per_cell: int = Field(default=16, ge=1)
    max_nodes_per_rack: int = Field(default=16, ge=1)
    max_nodes_per_job: int = Field(default=16, ge=1)
    max_gpus_per_cell: int = Field(default=128, ge=1)
    max_gpus_per_rack: int = Field(default=128, ge=1)
    max_gpus_per_job: int = Field(default=128, ge=1)
    max_fenced_share: float = Field(default=0.5, gt=0, le=1)
    min_fenced: int = Field(default=16, ge=1)
    group_past: int = Field(default=10, ge=1)


@dataclass
class FenceMark:
    """One fence issued without approval: when, on what, in which rack and for which job."""

    at: Instant
    node: str
    gpu: int | None
    rack: str | None
    job: str | None
    command: str


@dataclass
class Sent:
    """One ticket or notification issued in the window (``grouped``: the grouped one of its window)."""

    at: Instant
    type: str
    command: str
    grouped: bool = False


@dataclass
class BlastRadius:
    """The fences of the window and the commands held past the limit (part of the engine's state)."""

    marks: Annotated[deque[FenceMark], Bounded(_MARKS)] = field(default_factory=lambda: deque(maxlen=_MARKS))
    held: Annotated[deque[str], Bounded(_MARKS)] = field(default_factory=lambda: deque(maxlen=_MARKS))
    sent: Annotated[deque[Sent], Bounded(_MARKS)] = field(default_factory=lambda: deque(maxlen=_MARKS))
    folded: int = 0  # tickets and notifications folded into a grouped one (ever)

    def limit(self, cmds: list[Command], limits: BlastLimits, topo: Topology, ledger: QuarantineLedger,
              now: datetime) -> list[Command]:
        """``cmds`` as issued: each fence past the limit with ``requires_approval`` and the reason why."""
        horizon = now - timedelta(seconds=limits.window_s)
        while self.marks and self.marks[0].at < horizon:
            self.marks.popleft()
        while self.sent and self.sent[0].at < horizon:
            self.sent.popleft()
        out: list[Command] = []
        for c in cmds:
            if c.type in FENCES:
                out.append(self._one(c, limits, topo, ledger, now))
            elif c.type in _GROUPED:
                out.extend(self._group(c, limits, now))
            else:
                out.append(c)
        return out

    def _group(self, cmd: Command, limits: BlastLimits, now: datetime) -> list[Command]:
        """Tickets and notifications past ``group_past`` of a type in the window: one grouped command, then
        none until the window has room again (each incident still lists its own evidence)."""
        same = [s for s in self.sent if s.type == cmd.type]
        if len(same) < limits.group_past:
            self.sent.append(Sent(now, cmd.type, cmd.id))
            return [cmd]
        self.folded += 1
        if any(s.grouped for s in same):
            return []
        why = (f"blast radius: more than {limits.group_past} {cmd.type} within {limits.window_s:g} s; "
               f"the rest of the window's are grouped here (see the open incidents)")
        params = ({"to": "on-call", "severity": "page", "message": why} if cmd.type == "notify" else
                  {"kind": "investigate", "category": "grouped", "nodes": [], "gpus": [], "summary": why})
        grouped = cmd.model_copy(update={
            "id": f"{cmd.id}-grouped", "target": Target(), "params": params, "reason": why})
        self.sent.append(Sent(now, cmd.type, grouped.id, grouped=True))
        return [grouped]

    def held_reasons(self, cmds: list[Command]) -> list[str]:
        """The reasons of those of ``cmds`` this limit held for approval (what the incident then says)."""
        waiting = [c for c in cmds if c.requires_approval and c.type in FENCES]
        held = set(self.held) if waiting else set()
        return [c.reason.rsplit("; blast radius: ", 1)[-1] for c in waiting if c.id in held]

    def _one(self, cmd: Command, limits: BlastLimits, topo: Topology, ledger: QuarantineLedger,
             now: datetime) -> Command:
        node = cmd.target.node
        if node is None or cmd.requires_approval:
            return cmd  # a person decides it anyway (reboot_node and reset_gpu always wait for one)
        gpu = _index(topo, node, cmd.target.gpu) if cmd.type not in _NODE_FENCES else None
        why = self._past(cmd.id, node, gpu, topo.rack_of(node), cmd.target.job, limits, topo, ledger)
        if why is None:
            self.marks.append(FenceMark(now, node, gpu, topo.rack_of(node), cmd.target.job, cmd.id))
            return cmd
        self.held.append(cmd.id)
        BLAST_RADIUS_HELD.labels(cmd.type).inc()
        return cmd.model_copy(update={"requires_approval": True, "reason": f"{cmd.reason}; blast radius: {why}"})

    def _past(self, cmd_id: str, node: str, gpu: int | None, rack: str | None, job: str | None, limits: BlastLimits,
              topo: Topology, ledger: QuarantineLedger) -> str | None:
        """Why a fence of ``node`` (``gpu``) would pass the limit; None when it is within it."""
        w = f"within {limits.window_s:g} s"
        scopes = [("the cell", lambda m: True, limits.max_nodes_per_cell, limits.max_gpus_per_cell)]
        if rack is not None:
            scopes.append((f"rack {rack}", lambda m: m.rack == rack, limits.max_nodes_per_rack,
                           limits.max_gpus_per_rack))
        if job is not None:
            scopes.append((f"job {job}", lambda m: m.job == job, limits.max_nodes_per_job, limits.max_gpus_per_job))
        for name, inside, max_nodes, max_gpus in scopes:
            marks = [m for m in self.marks if inside(m)]
            nodes = {m.node for m in marks}
            if node not in nodes and len(nodes) + 1 > max_nodes:
                return f"{len(nodes) + 1} nodes fenced in {name} {w}, the limit is {max_nodes}"
            gpus = {(m.node, m.gpu) for m in marks if m.gpu is not None}
            if gpu is not None and (node, gpu) not in gpus and len(gpus) + 1 > max_gpus:
                return f"{len(gpus) + 1} GPUs fenced in {name} {w}, the limit is {max_gpus}"
        held = {*self.held, cmd_id}  # the ledger already holds this command's own fence
        out = {n for n, f in ledger.nodes.items() if f.command not in held}
        out |= {n for n, gpus in ledger.gpus.items() for f in gpus.values() if f.command not in held}
        cap = max(limits.min_fenced, int(limits.max_fenced_share * len(topo.nodes)))
        if node not in out and len(out) + 1 > cap:
            return (f"{len(out) + 1} of the cell's {len(topo.nodes)} nodes out of service at once, the limit is "
                    f"{cap} ({limits.max_fenced_share:.0%}, at least {limits.min_fenced})")
        return None


def _index(topo: Topology, node: str, gpu_id: str | None) -> int | None:
    if gpu_id is None:
        return None
    n = topo.nodes.get(node)
    for i in n.gpus if n is not None else ():
        if topo.gpu_id(node, i) == gpu_id:
            return i
    return zlib.crc32(gpu_id.encode()) & 0xFFFF  # a GPU the inventory does not list: its id tells it apart
