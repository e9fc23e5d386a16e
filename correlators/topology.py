"""Who holds what: nodes, their GPUs and power domains, and which job runs where.

Signals arrive keyed by where they were seen (node, GPU); incidents are keyed by
job. This is the join between the two, built from inventory and scheduler events.

Part of the engine's state (:mod:`correlators.state`), so plain data: a job
keeps its scheduler line (``spec``); the rank <-> (node, GPU) maps are derived
from it on first use, never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from correlators.state_fields import Instant
from streams.events import GpuRef, Inventory, JobStarted, LaunchConfig

__all__ = ["Gpu", "Node", "Job", "JobEnd", "Launch", "Topology"]


@dataclass
class Gpu:
    node: str
    index: int
    uuid: str | None = None
    pci: str | None = None
    name: str | None = None
    power_domain: str | None = None

    @property
    def id(self) -> str:
        """The id commands and incidents use: the UUID when known."""
        return self.uuid or f"{self.node}:{self.index}"


@dataclass
class Node:
    name: str
    rack: str | None = None
    gpus: dict[int, Gpu] = field(default_factory=dict)


@dataclass
class JobEnd:
    at: Instant
    status: Literal["finished", "failed", "cancelled"]


@dataclass
class Job:
    name: str
    spec: JobStarted
    starts: int = 1
    running: bool = True
    ended: JobEnd | None = None
    # The incident whose fenced hardware this run was started on (the scheduler did not enforce the fence):
    # the failure that follows is that incident's, not a new one.
    breach: str | None = None

    @property
    def over(self) -> bool:
        """The run ended without failing (cancelled, finished) and has not started again: what its ranks
        report now is the tail of that end (SIGTERM, a CUDA context torn down), not a failure to restart."""
        return not self.running and self.ended is not None and self.ended.status != "failed"

    @cached_property
    def rank_of(self) -> dict[tuple[str, int], int]:
        """(node, GPU index) -> global rank, from the allocation (GPUs missing from it: by position)."""
        return {place: rank for rank, place in self._places()}

    @cached_property
    def place_of(self) -> dict[int, tuple[str, int]]:
        """Global rank -> (node, GPU index)."""
        return dict(self._places())

    def _places(self) -> list[tuple[int, tuple[str, int]]]:
        return [(rank, (alloc.node, alloc.gpus[i] if i < len(alloc.gpus) else i))
                for alloc in self.spec.allocation for i, rank in enumerate(alloc.ranks)]

    @property
    def nodes(self) -> list[str]:
        return [a.node for a in self.spec.allocation]

    @property
    def world_size(self) -> int:
        return self.spec.world_size or len(self.place_of)

    @property
    def owner(self) -> str | None:
        return self.spec.owner


@dataclass
class Launch:
    """What the job's torchelastic launcher said it forms (:class:`~streams.events.LaunchConfig`), field by
    field as its lines come; it outlives a run (a restart relaunches with the same configuration)."""

    min_nodes: int | None = None
    max_nodes: int | None = None
    nproc_per_node: int | None = None

    def merge(self, cfg: LaunchConfig) -> None:
        if cfg.min_nodes is not None and cfg.max_nodes is not None:  # a whole range replaces the one known
            self.min_nodes, self.max_nodes = cfg.min_nodes, cfg.max_nodes
        elif cfg.min_nodes is not None:
            self.min_nodes = cfg.min_nodes
        elif cfg.max_nodes is not None:
            self.max_nodes = cfg.max_nodes
        if cfg.nproc_per_node:
            self.nproc_per_node = cfg.nproc_per_node


@dataclass
class Topology:
    nodes: dict[str, Node] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    launch: dict[str, Launch] = field(default_factory=dict)  # job -> its launcher's configuration

    # --- updates -----------------------------------------------------------------
    def apply_inventory(self, node: str, inv: Inventory) -> None:
        n = self.node(node)
        if inv.rack:
            n.rack = inv.rack
        for g in inv.gpus:
            n.gpus[g.index] = Gpu(node, g.index, g.uuid, g.pci, g.name, g.power_domain)

    def apply_job_started(self, job: str, spec: JobStarted) -> Job:
        prev = self.jobs.get(job)
        j = Job(job, spec, starts=(prev.starts + 1) if prev else 1)
        for alloc in spec.allocation:
            self.node(alloc.node)
        self.jobs[job] = j
        return j

    def node(self, name: str) -> Node:
        if name not in self.nodes:
            self.nodes[name] = Node(name)
        return self.nodes[name]

    # --- queries -----------------------------------------------------------------
    def knows(self, node: str, index: int | None = None) -> bool:
        """Whether an inventory or a job's allocation names ``node`` (and its GPU ``index``, if given): what
        nothing names is a typo or a forgery, never hardware to fence (a lookup by :meth:`gpu` adds a node
        to :attr:`nodes` without naming it)."""
        n = self.nodes.get(node)
        if n is not None and (index in n.gpus if index is not None else bool(n.gpus)):
            return True
        return any(a.node == node and (index is None or index in a.gpus)
                   for j in self.jobs.values() for a in j.spec.allocation)

    def resolve(self, node: str | None, ref: GpuRef | None) -> int | None:
        """The index of the GPU ``ref`` names on ``node``, whatever form it uses."""
        if node is None or ref is None:
            return None
        gpus = self.nodes[node].gpus if node in self.nodes else {}
        for g in gpus.values():
            if ref.uuid and g.uuid and ref.uuid.lower() == g.uuid.lower():
                return g.index
            if ref.pci and g.pci and ref.pci == g.pci:
                return g.index
        return ref.index

    def gpu(self, node: str, index: int) -> Gpu:
        n = self.node(node)
        return n.gpus.get(index) or Gpu(node, index)

    def gpu_id(self, node: str, index: int) -> str:
        return self.gpu(node, index).id

    def running_jobs_on(self, node: str, index: int | None = None) -> list[Job]:
        """Running jobs using ``node`` (and GPU ``index`` when given)."""
        out = []
        for j in self.jobs.values():
            if not j.running:
                continue
            if index is None and node in j.nodes:
                out.append(j)
            elif index is not None and (node, index) in j.rank_of:
                out.append(j)
        return out

    def jobs_on(self, node: str, index: int | None = None) -> list[Job]:
        """Jobs whose latest allocation holds ``node`` (and GPU ``index`` when given), running or not."""
        return [j for j in self.jobs.values()
                if (node in j.nodes if index is None else (node, index) in j.rank_of)]

    def power_domain_peers(self, node: str, index: int) -> list[int]:
        dom = self.gpu(node, index).power_domain
        if dom is None:
            return []
        return sorted(g.index for g in self.node(node).gpus.values() if g.power_domain == dom)

    def rack_of(self, node: str) -> str | None:
        return self.nodes[node].rack if node in self.nodes else None

    def rack_nodes(self, rack: str) -> list[str]:
        return sorted(n.name for n in self.nodes.values() if n.rack == rack)
