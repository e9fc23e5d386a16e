"""How many GPUs a restart asks for: a world the job's launcher can form.

The rule, **whole nodes**: torchelastic's elasticity is in nodes, each running ``nproc_per_node``
workers, so a restart asks for ``nodes x nproc_per_node`` GPUs with ``nodes`` within the launcher's
``[min_nodes, max_nodes]`` -- never 63 GPUs of nodes of 8, never 15 when ``nproc_per_node`` is 4.

* ``nproc_per_node``: the launcher's own line (:class:`~correlators.topology.Launch`); without one, the
  job's ranks per node in its allocation (all equal: that count -- 4 for a job holding half of each
  8-GPU node; unequal: their greatest common divisor), never the node's GPU count.
* The node range: the launcher's; without one, the scheduler's elastic range in GPUs turned into
  whole nodes (at least ``min_gpus``: rounded up; at most ``max_gpus``: rounded down). Where both are
  known and overlap, both hold; where they do not, the launcher's (it is what forms the world).
* A fixed-size job (one node count, no launcher range) keeps its size.
* An elastic job asks for the whole nodes its allocation can still form -- per node, the job's own
  GPUs there that are not fenced or left out, in whole groups of ``nproc_per_node`` -- within the range:
  below the floor it asks for the floor (spares make it up), above the ceiling for the ceiling.

The restart's ``params.sizing`` and its reason say which rule decided and from what.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from correlators.topology import Job, Launch

__all__ = ["Sizing", "restart_size"]


@dataclass(frozen=True)
class Sizing:
    gpus: int
    per_node: int
    nodes: int
    min_nodes: int
    max_nodes: int
    formable: int  # whole nodes what is left of the allocation can form
    source: str  # where nproc_per_node came from

    @property
    def elastic(self) -> bool:
        return self.min_nodes < self.max_nodes

    def params(self) -> dict[str, Any]:
        return {"rule": "whole nodes", "nproc_per_node": self.per_node, "nodes": self.nodes,
                "min_nodes": self.min_nodes, "max_nodes": self.max_nodes, "formable_nodes": self.formable,
                "nproc_from": self.source}

    def text(self) -> str:
        bound = (" (the launcher's floor)" if self.nodes > self.formable else
                 " (the launcher's ceiling)" if self.nodes < self.formable else "")
        return (f"sized {self.gpus} GPUs: {self.nodes} whole node(s){bound} of nproc_per_node={self.per_node} "
                f"({self.source}), within {self.min_nodes}-{self.max_nodes} nodes; {self.formable} formable "
                "from what is left")


def _per_node(job: Job, launch: Launch | None) -> tuple[int, str]:
    if launch is not None and launch.nproc_per_node:
        return launch.nproc_per_node, "the torchelastic launch config"
    counts = [len(a.ranks) for a in job.spec.allocation if a.ranks]
    if not counts:
        return 1, "no allocation known"
    if len(set(counts)) == 1:
        return counts[0], "ranks per node of the allocation"
    return max(1, math.gcd(*counts)), "the common divisor of the allocation's ranks per node"


def _range(job: Job, launch: Launch | None, per_node: int) -> tuple[int, int]:
    el = job.spec.elastic
    world = job.world_size
    lo_g, hi_g = (el.min_gpus, el.max_gpus) if el is not None else (world, world)
    g_lo, g_hi = max(1, math.ceil(lo_g / per_node)), max(1, hi_g // per_node)
    if g_lo > g_hi:  # no whole-node world within the GPU range: the fewest nodes that hold its floor
        g_hi = g_lo
    if launch is None or (launch.min_nodes is None and launch.max_nodes is None):
        return g_lo, g_hi
    l_lo = launch.min_nodes if launch.min_nodes is not None else min(g_lo, launch.max_nodes or g_lo)
    l_hi = launch.max_nodes if launch.max_nodes is not None else max(g_hi, l_lo)
    both = max(l_lo, g_lo), min(l_hi, g_hi)
    return both if both[0] <= both[1] else (l_lo, l_hi)


def restart_size(job: Job, launch: Launch | None, usable: Callable[[str, int], bool]) -> Sizing:
    """The restart's size by the whole-nodes rule; ``usable(node, gpu)``: not fenced, not left out."""
    per_node, source = _per_node(job, launch)
    lo, hi = _range(job, launch, per_node)
    left: Counter[str] = Counter(n for (n, i) in job.rank_of if usable(n, i))
    formable = sum(k // per_node for k in left.values())
    el = job.spec.elastic
    ranged = launch is not None and (launch.min_nodes is not None or launch.max_nodes is not None)
    if (el is None or el.min_gpus == el.max_gpus) and not ranged:
        fixed = el.max_gpus if el is not None else job.world_size  # a fixed job keeps its size
        return Sizing(fixed, per_node, lo, lo, hi, formable, source)
    nodes = max(lo, min(hi, formable))
    return Sizing(nodes * per_node, per_node, nodes, lo, hi, formable, source)
