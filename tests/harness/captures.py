"""Captures whose decisions are spread through them: what a fault injected "while deciding" needs.

A public scenario decides in one burst (xid79_multi_node: 3 commands within a second of event
time, at events 2,475-2,526 of 3,649), so a fault drawn at random mostly lands where nothing is
left to decide. :func:`spread_capture` lays several simulated jobs (:class:`faultline.simulate.Fleet`,
each on nodes and GPUs of its own) over one stretch of time, with a GPU falling off the bus
under each at a different moment and the job recovering on a spare node after it: incidents
open, fence, restart and verify one after another from the first fifth of the stream to its end.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from faultline.simulate import FaultPlan, Fleet

__all__ = ["spread_capture"]


@dataclass
class _Job(Fleet):
    """A fleet whose nodes, GPUs and job are named after ``tag``, so several share one capture."""

    tag: str = "a"

    def node_name(self, n: int) -> str:
        return f"{self.tag}-node-{n + 1:02d}"

    def uuid(self, n: int, i: int) -> str:
        h = hashlib.sha256(f"{self.tag}-{self.seed}-{n}-{i}".encode()).hexdigest()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def spread_capture(jobs: int = 4, duration_s: float = 1500, seed: int = 7) -> list[bytes]:
    """Capture lines (time order) of ``jobs`` jobs, each losing a GPU at its own time, evenly spread."""
    lines: list[tuple[str, bytes]] = []
    first, last = 0.2 * duration_s, 0.8 * duration_s
    for k in range(jobs):
        at = first + (last - first) * k / max(1, jobs - 1)
        fleet = _Job(nodes=2, gpus_per_node=4, duration_s=duration_s, sample_every_s=30, heartbeat_every_s=30,
                     step_every_s=20, checkpoint_every_s=120, job=f"job-{chr(97 + k)}", seed=seed + k,
                     fault=FaultPlan(at_s=at, node=k % 2, gpu=(k * 3) % 4), tag=chr(97 + k))
        for text in fleet.lines():
            lines.append((json.loads(text)["ts"], text.encode()))
    lines.sort(key=lambda t: t[0])
    return [raw for _, raw in lines]
